"""Which input sizes spatial_tf's U-Net takes: shared by ``unet3d`` and its presets."""

from typing import Optional

__all__ = ["output_size", "valid_sizes"]


def output_size(size: int, depth: int, padding: str = "same",
                downsample: str = "pool") -> Optional[int]:
    """Output spatial size of the U-Net for input ``size``, or None if it does not fit.

    >>> output_size(64, 3), output_size(44, 3, "valid"), output_size(45, 3, "valid")
    (64, 4, None)
    """
    shrink = 4 if padding == "valid" else 0  # two 3x3 convolutions per block
    for _ in range(depth - 1):
        size -= shrink
        if downsample == "pool" or padding == "same":
            if size < 2 or size % 2:
                return None
            size //= 2
        else:  # stride-2 valid 3x3 convolution
            if size < 3 or (size - 3) % 2:
                return None
            size = (size - 3) // 2 + 1
    size -= shrink
    for _ in range(depth - 1):
        size = 2 * size - shrink
    return size if size > 0 else None


def valid_sizes(size: int, depth: int, padding: str = "same", downsample: str = "pool") -> str:
    """The nearest sizes below and above ``size`` that fit, for messages.

    >>> valid_sizes(59, 3)
    '56 or 60'
    """
    def fits(c):
        return output_size(c, depth, padding, downsample)

    below = next((c for c in range(size - 1, 0, -1) if fits(c)), None)
    above = next(c for c in range(size + 1, size + 8 * 2**depth) if fits(c))
    return f"{below} or {above}" if below else str(above)
