"""``tpu.outside_compilation`` inside an emulated step.

On TPU, ``tf.compat.v1.tpu.outside_compilation(fn, *args)`` runs ``fn`` on the host in
the middle of the step. The emulator compiles each step as one XLA program and cannot
hand part of it to the host. Outside a TPU computation TensorFlow itself runs ``fn``
inline (``tensorflow/python/tpu/tpu_replication.py``), so ``fn`` is traced into the
program: ops XLA compiles work as on TPU; for an op XLA cannot compile
(``tf.py_function``, printing through Python), ``explain`` turns the compile error into
one that says why the emulator refuses what a TPU would run, and what to do. Which ops
came from ``outside_compilation`` is read from each op's traceback, so nothing in
TensorFlow is replaced.

>>> import tensorflow as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     inside = tf.compat.v1.tpu.outside_compilation(lambda: tf.constant(1.0, name="on_host"))
...     outside = tf.constant(2.0, name="in_step")
>>> made_by_outside_compilation(inside.op), made_by_outside_compilation(outside.op)
(True, False)
"""
import os

from spatial_tf.emulator.xla.errors import CompileError

__all__ = ["made_by_outside_compilation", "explain"]

_TPU_DIR = os.sep + os.path.join("tensorflow", "python", "tpu") + os.sep


def made_by_outside_compilation(op) -> bool:
    """True if ``op`` was created inside ``tpu.outside_compilation``'s function."""
    return any(frame.name == "outside_compilation" and _TPU_DIR in frame.filename
               for frame in op.traceback)


def explain(error, graph):
    """A ``CompileError`` about ``outside_compilation`` if ``error``'s op in ``graph`` (the
    traced step's) was made inside it; otherwise ``error`` itself."""
    if not isinstance(error, CompileError):
        return error
    try:
        op = graph.get_operation_by_name(error.op_name)
    except (KeyError, ValueError, TypeError):
        return error
    if not made_by_outside_compilation(op):
        return error
    return CompileError(
        f"{error.function}: TensorFlow op {error.op_type} (node '{error.op_name}') is inside "
        f"tpu.outside_compilation and has no XLA kernel. TPUStrategy runs that function on "
        f"the host in the middle of the step; the emulator compiles the whole step as one "
        f"XLA program and cannot. Expected ops XLA compiles inside the step. Fix: do the "
        f"host work before strategy.run (in the input pipeline) or after it (on the "
        f"results), or write it with TensorFlow ops XLA compiles (tf.print and tf.summary "
        f"work in a step).",
        error.function, error.op_type, error.op_name,
    )
