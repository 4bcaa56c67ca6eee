"""``python -m spatial_tf cache``: the compile cache's folder, how many results it holds,
their size against the limit and the most recently used ones; ``cache clear`` empties it.

    python -m spatial_tf cache
    python -m spatial_tf cache list --sort size --top 20
    python -m spatial_tf cache clear

It only reads (or empties) the folder: no TensorFlow, jax or libtpu is imported.
"""
import datetime
import os

from spatial_tf.commands.options import add_command, fail, positive_int

__all__ = ["add_parser", "run"]

PROG = "python -m spatial_tf cache"
KINDS = {".json": "TPU compile", ".bin": "CPU executable"}

EPILOG = """\
The folder is SPATIAL_TF_COMPILE_CACHE (default ~/.cache/spatial_tf/compiles;
off turns the cache off). Its limit is SPATIAL_TF_COMPILE_CACHE_LIMIT: a size
such as 2GiB or 500MB, or bytes (default 4GiB; 0 or off for no limit). After
each new result is stored, the least recently used ones are removed until the
rest fit. A cleared result is compiled again when it is next needed.

examples:
  python -m spatial_tf cache
  python -m spatial_tf cache list --sort size --top 20
  python -m spatial_tf cache clear"""


def add_parser(subparsers):
    p = add_command(
        subparsers, "cache", help="list or clear the compile cache (TPU compiles, CPU "
                                  "executables)",
        description="Show the compile cache: its folder, how many compile results it\n"
                    "holds, their total size against the limit, and the most recently\n"
                    "used ones; or remove them all.",
        epilog=EPILOG)
    p.add_argument("action", nargs="?", choices=("list", "clear"), default="list",
                   help="list (default) or clear")
    p.add_argument("--sort", choices=("recent", "size"), default="recent",
                   help="list the most recently used (default) or the largest first")
    p.add_argument("--top", type=positive_int(1), default=10, metavar="N",
                   help="how many results to list (default 10)")
    p.set_defaults(func=run)
    return p


def run(args):
    from spatial_tf.emulator.xla import compile_cache
    from spatial_tf.table import format_bytes

    folder = compile_cache.directory()
    if folder is None:
        print(f"Compile cache: off ({compile_cache.ENV}="
              f"{os.environ.get(compile_cache.ENV, '')}); nothing is stored.")
        return 0
    if args.action == "clear":
        count, size = compile_cache.clear()
        print(f"Removed {_results(count)} ({format_bytes(size)}) from {folder}.")
        return 0
    try:
        most = compile_cache.limit()
    except ValueError as e:
        return fail(PROG, str(e))
    found = compile_cache.entries()
    total = sum(entry.size for entry in found)
    limit = (f"of a {format_bytes(most)} limit ({compile_cache.LIMIT_ENV})"
             if most is not None else f"(no limit: {compile_cache.LIMIT_ENV}="
                                      f"{os.environ.get(compile_cache.LIMIT_ENV)})")
    print(f"Compile cache: {folder}" + ("" if folder.is_dir() else " (not made yet)"))
    print(f"{_results(len(found))}, {format_bytes(total)} {limit}")
    if found:
        print()
        print(_table(found, args.sort, args.top))
    return 0


def _results(count):
    """``_results(1) == "1 compile result"``, ``_results(3) == "3 compile results"``."""
    from spatial_tf.table import plural

    return plural(count, "compile result")


def _table(found, sort, top):
    """The ``top`` entries, most recently used or largest first, as a table (with a
    line saying how many more there are)."""
    from spatial_tf.table import format_bytes, format_table

    if sort == "size":
        found = sorted(found, key=lambda entry: entry.size, reverse=True)
    rows = [[_when(entry.last_used), format_bytes(entry.size),
             KINDS.get(entry.path.suffix, entry.path.suffix), entry.path.stem[:12]]
            for entry in found[:top]]
    table = format_table(["last used", "size", "kind", "entry"], rows,
                         title="Largest:" if sort == "size" else "Most recently used:",
                         right=("size",))
    more = len(found) - len(rows)
    return table + (f"\n({more} more; --top {len(found)} lists them all)" if more else "")


def _when(seconds):
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M")
