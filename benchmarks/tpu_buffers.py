"""Benchmark: where a partitioned TPU step's temp memory goes, op by op, against its
one-core program.

Reads two folders that XLA's TPU compiler dumped (``SPATIAL_TF_TPU_COMPILER_DUMP=DIR``
while a ``report(..., target=...)`` compiles both programs; the folders are named
``<step>-<N>cores-<random>``) and prints the temp buffers live at each program's peak,
added up per TensorFlow op: bytes per core in the partitioned program beside the
one-core program's bytes divided by N (what a perfect split would hold). Ops whose ratio
is well above 1 are the ones that hold more than their share: gathered, replicated, or
padded to the TPU's tiles.

    SPATIAL_TF_TPU_COMPILER_DUMP=/tmp/dump python benchmarks/video_movinet.py \\
        --frames 32 --specs 1,4,1,1,1 --forms friendly --target v5e
    python benchmarks/tpu_buffers.py /tmp/dump            # the two folders found there
    python benchmarks/tpu_buffers.py ONE_CORE_FOLDER PARTITIONED_FOLDER --top 25

Figures are the TPU compiler's (libtpu, compile-only), as its buffer assignment has them.
"""
import argparse
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

_CORES = re.compile(r"-(\d+)cores-\w+$")


def cores_of(folder):
    """N from a dump folder named ``<step>-<N>cores-<random>``."""
    match = _CORES.search(os.path.basename(os.path.normpath(folder)))
    if not match:
        raise SystemExit(f"{folder}: not a folder named <step>-<N>cores-<random>, as "
                         f"SPATIAL_TF_TPU_COMPILER_DUMP writes them")
    return int(match.group(1))


def pair(folders):
    """(one-core folder, partitioned folder) from the arguments."""
    if len(folders) == 2:
        return tuple(sorted(folders, key=cores_of))
    found = sorted(glob.glob(os.path.join(folders[0], "*-*cores-*")), key=os.path.getmtime)
    ones = [f for f in found if cores_of(f) == 1]
    parts = [f for f in found if cores_of(f) > 1]
    if not ones or not parts:
        raise SystemExit(f"{folders[0]}: expected a one-core and a partitioned dump folder, "
                         f"found {[os.path.basename(f) for f in found]}")
    return ones[-1], parts[-1]  # the latest of each


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", help="a dump root, or the one-core and the "
                                              "partitioned program's folders")
    p.add_argument("--top", type=int, default=20, help="rows to print (default 20)")
    p.add_argument("--depth", type=int, default=0,
                   help="group op names by their first DEPTH parts (0: the whole name)")
    args = p.parse_args(argv)

    from spatial_tf.emulator.tpu import buffers
    from spatial_tf.table import format_bytes, format_table

    one_folder, part_folder = pair(args.folders)
    n = cores_of(part_folder)
    one, part = buffers.peak(one_folder), buffers.peak(part_folder)
    group = (lambda op: op) if not args.depth else (
        lambda op: "/".join(op.split("/")[:args.depth]))
    totals = {}
    for column, found in ((0, one), (1, part)):
        for op, size, _ in buffers.by_op(found.buffers):
            totals.setdefault(group(op) or "(no op name)", [0, 0])[column] += size
    rows = sorted(totals.items(), key=lambda item: -item[1][1])
    table = [[op, format_bytes(a / n), format_bytes(b), f"{b / (a / n):.2f}" if a else "-"]
             for op, (a, b) in rows[:args.top]]
    rest = rows[args.top:]
    if rest:
        a, b = sum(r[1][0] for r in rest), sum(r[1][1] for r in rest)
        table.append([f"({len(rest)} more ops)", format_bytes(a / n), format_bytes(b),
                      f"{b / (a / n):.2f}" if a else "-"])
    table.append(["live at the peak", format_bytes(one.peak / n), format_bytes(part.peak),
                  f"{part.peak / (one.peak / n):.2f}"])
    table.append(["temp allocated", format_bytes(one.temp / n), format_bytes(part.temp),
                  f"{part.temp / (one.temp / n):.2f}"])
    print(format_table(
        ["op", f"one core / {n}", f"per core on {n}", "ratio"], table,
        right=(f"one core / {n}", f"per core on {n}", "ratio"),
        title=f"Temp buffers live at the peak (TPU compiler's buffer assignment): "
              f"{os.path.basename(one_folder)} vs {os.path.basename(part_folder)}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
