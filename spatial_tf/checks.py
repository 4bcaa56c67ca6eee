"""Argument checks shared across the package, with messages in one form.

>>> check_int(4, "num_replicas", "num_replicas=2")
4
>>> check_int(0, "num_replicas", "num_replicas=2")
Traceback (most recent call last):
...
ValueError: num_replicas is 0; expected a positive int. Fix: e.g. num_replicas=2.
"""
import numbers
from typing import Any, Optional

__all__ = ["check_int", "CORE_COUNTS"]

# cores per replica TPUConfig and spatial_tf accept (spatial_tf.spec's rule, without TF)
CORE_COUNTS = tuple(2**i for i in range(8))


def check_int(value: Any, name: str, example: str, *, minimum: Optional[int] = 1,
              expected: Optional[str] = None, where: Optional[str] = None,
              as_argument: bool = False) -> int:
    """``value`` as an int ``>= minimum``, or a ``TypeError`` / ``ValueError`` naming it.

    ``name``: the argument as the user wrote it; ``example``: a correct call for the fix;
    ``expected``: what a valid value is, in words (default: "a positive int" or "an int
    >= minimum"); ``where``: an optional prefix (the function or slice it belongs to).
    ``minimum=None`` checks the type only; ``as_argument`` shows ``name=value`` rather
    than ``name is value``.
    """
    head = f"{where}: " if where else ""
    shown = (lambda v: f"{name}={v}") if as_argument else (lambda v: f"{name} is {v}")
    if expected is None:
        expected = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{head}{shown(repr(value))} ({type(value).__name__}); expected {expected}. "
            f"Fix: e.g. {example}."
        )
    if minimum is not None and value < minimum:
        raise ValueError(f"{head}{shown(value)}; expected {expected}. Fix: e.g. {example}.")
    return int(value)
