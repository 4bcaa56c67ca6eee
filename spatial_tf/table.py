"""Plain-text tables for summaries, reports and the CLI.

>>> print(format_table(["name", "bytes"], [["image", 1024], ["label", 8]]))
name   bytes
-----  -----
image   1024
label      8
"""

__all__ = ["format_table", "format_bytes"]


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
