"""Plain-text tables for summaries, reports and the CLI.

>>> print(format_table(["name", "bytes"], [["image", 1024], ["label", 8]]))
name   bytes
-----  -----
image   1024
label      8
"""

import re
from typing import Optional

__all__ = ["format_table", "format_bytes", "parse_size", "plural", "SIZE_UNITS"]

# a size's unit -> bytes: KiB, MiB, ... and numpy/TF-style K, M, ... are powers of 1024;
# KB, MB, ... powers of 1000
SIZE_UNITS = {
    "": 1, "b": 1,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> Optional[int]:
    """Bytes of a size written as a number and a unit (``SIZE_UNITS``, any case), or None
    when ``text`` is not of that form (a name, say).

    >>> parse_size("2GiB"), parse_size("500 MB"), parse_size("1048576"), parse_size("v3")
    (2147483648, 500000000, 1048576, None)

    Raises:
      ValueError: a unit not in ``SIZE_UNITS`` ("expected a size unit among ...").
    """
    size = _SIZE.match(text)
    if size is None:
        return None
    unit = SIZE_UNITS.get(size.group(2).lower())
    if unit is None:
        raise ValueError(f"expected a size unit among {', '.join(u for u in SIZE_UNITS if u)}")
    return int(float(size.group(1)) * unit)


def format_table(headers, rows, title=None, right=()):
    """Left-align text columns, right-align numeric ones and those named in ``right``."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        headers[i] in right
        or (bool(rows) and all(_is_number(r[i]) for r in rows if r[i] not in (None, "")))
        for i in range(len(headers))
    ]

    def line(row):
        parts = [
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)
        ]
        return "  ".join(parts).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    if title:
        out.insert(0, title)
    return "\n".join(out)


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def format_bytes(n):
    """Human-readable bytes: ``format_bytes(3 * 2**20) == '3.0 MiB'``."""
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def plural(count: int, word: str, many: Optional[str] = None) -> str:
    """``count`` and ``word``, made plural (``many``, else ``word`` + "s") unless 1.

    >>> plural(1, "core"), plural(8, "core"), plural(0, "held-out volume")
    ('1 core', '8 cores', '0 held-out volumes')
    >>> plural(2, "core per chip", "cores per chip")
    '2 cores per chip'
    """
    return f"{count} {word if count == 1 else many or word + 's'}"
