"""Moved to tools/mutation.py; this path runs it, with a notice, for one release."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _moved import run_moved  # noqa: E402

if __name__ == "__main__":
    run_moved(__file__)
