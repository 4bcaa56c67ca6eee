"""Ways to damage checkpoint files, shared by the checkpoint tests of the library and the CLI."""
import os

DATA = "ckpt-3.data-00000-of-00001"   # the data file of the latest checkpoint the tests save


def truncate(path):
    """Cut the file to half its size."""
    os.truncate(path, os.path.getsize(path) // 2)


def zero(path):
    """Overwrite every byte with 0, keeping the size."""
    size = os.path.getsize(path)
    with open(path, "wb") as f:
        f.write(b"\0" * size)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
