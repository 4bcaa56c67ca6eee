"""Runs a tool that moved from benchmarks/ to tools/ (it tests, it does not benchmark),
with a notice: the old path works for one release."""
import os
import runpy
import sys


def run_moved(old_path):
    name = os.path.basename(old_path)
    moved = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(old_path))), "tools", name)
    print(f"benchmarks/{name} moved to tools/{name}; running that.", file=sys.stderr)
    sys.argv[0] = moved
    runpy.run_path(moved, run_name="__main__")
