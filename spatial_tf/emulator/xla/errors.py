"""Why a step function cannot be compiled, said in terms of the TensorFlow op at fault.

XLA needs every op to have an XLA kernel and every shape to be known at compile time.
TensorFlow reports the first problem deep inside a long message; ``CompileError`` names
the op, where it was created and what to do instead.

>>> err = CompileError.for_op("step", "EagerPyFunc", "EagerPyFunc", "has no XLA kernel",
...                           "move it out of the step function")
>>> print(err)  # doctest: +NORMALIZE_WHITESPACE
step: TensorFlow op EagerPyFunc (node 'EagerPyFunc') has no XLA kernel. Fix: move it
out of the step function.
"""
import re

from spatial_tf.error import Error

__all__ = ["CompileError", "from_tensorflow_error", "dynamic_shape_error"]


class CompileError(Error, ValueError):
    """The step function cannot be compiled by XLA; ``op_type`` / ``op_name`` say where."""

    def __init__(self, message, function=None, op_type=None, op_name=None):
        super().__init__(message)
        self.function = function
        self.op_type = op_type
        self.op_name = op_name

    @classmethod
    def for_op(cls, function, op_type, op_name, problem, fix, where=None, detail=None):
        """An error that names the op, its node, its source line, the problem and the fix."""
        node = f" (node '{op_name}')" if op_name else ""
        at = f", created at {where}," if where else ""
        text = f"{function}: TensorFlow op {op_type}{node}{at} {problem}. Fix: {fix}."
        if detail:
            text += f"\n{detail}"
        return cls(text, function, op_type, op_name)


_NO_KERNEL = re.compile(r"(\w+) \(No registered '(\w+)' OpKernel for (\w+) devices")
_NOT_CONSTANT = re.compile(r"Input (\d+) to node `([^`]+)` with op (\w+) must be a compile-time constant")
_NODE = re.compile(r"\{\{node ([^}]+)\}\}")
_SOURCE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')

_NO_KERNEL_FIX = (
    "run it outside the step function (in the input pipeline, or on the results), or "
    "replace it with ops XLA supports; the same step would fail on TPU"
)
_NOT_CONSTANT_FIX = (
    "compute this shape from static sizes (x.shape rather than tf.shape(x) of a "
    "data-dependent value), or move the op out of the step function"
)
_DYNAMIC_FIX = (
    "a step's results need static shapes; reduce the data-dependent tensor inside the "
    "step (a sum or mean of a tf.boolean_mask compiles with bounded sizes), keep sizes "
    "fixed (masks or tf.where(cond, x, y) instead of tf.boolean_mask / tf.unique / "
    "tf.where(cond)), or move the op out of the step function"
)


def from_tensorflow_error(function, error):
    """A ``CompileError`` for TensorFlow's tf2xla failure ``error``, or None if not one."""
    text = str(error)
    where = _user_source(text)
    m = _NO_KERNEL.search(text)
    if m:
        node = _NODE.search(text[m.end():])
        return CompileError.for_op(
            function, m.group(2), node.group(1) if node else m.group(1),
            f"has no XLA kernel for {m.group(3)}", _NO_KERNEL_FIX, where,
        )
    m = _NOT_CONSTANT.search(text)
    if m:
        return CompileError.for_op(
            function, m.group(3), m.group(2),
            f"needs input {m.group(1)} (a shape or size) to be known at compile time, but "
            f"it depends on the data",
            _NOT_CONSTANT_FIX, where,
        )
    if "tf2xla conversion failed" in text or "Failed getting HLO" in text:
        first = text.split("\n", 1)[0].strip(" '")
        node = _NODE.search(text)
        return CompileError.for_op(
            function, "(unknown)", node.group(1) if node else None,
            "could not be converted to XLA", "see TensorFlow's message below", where,
            detail=first,
        )
    return None


def _user_source(text):
    """The last ``file:line (function)`` of the op's creation stack outside TensorFlow."""
    frames = [
        m for m in _SOURCE.finditer(text)
        if "site-packages" not in m.group(1) and "/tensorflow/" not in m.group(1)
    ]
    if not frames:
        return None
    path, line, func = frames[-1].groups()
    return f"{path}:{line} ({func})"


def _dynamic(shape):
    return any(shape.is_dynamic_dimension) or any(_dynamic(s) for s in shape.tuple_shapes)


def dynamic_shape_error(function, hlo_module):
    """A ``CompileError`` when a result of the step has a data-dependent size, or None.

    Inside the step, data-dependent sizes (``tf.boolean_mask``, ``tf.where(cond)``) compile
    with bounded sizes, as TPUStrategy compiles them (XLA's dynamic padder), and partition;
    a result whose size depends on the data cannot leave the step. The error names the
    first op that made a data-dependent size.
    """
    entry = next(c for c in hlo_module.computations if c.id == hlo_module.entry_computation_id)
    root = next(i for i in entry.instructions if i.id == entry.root_id)
    if not _dynamic(root.shape):
        return None
    for computation in hlo_module.computations:
        for instruction in computation.instructions:
            if _dynamic(instruction.shape):
                meta = instruction.metadata
                return CompileError.for_op(
                    function, meta.op_type or instruction.opcode, meta.op_name or None,
                    "makes a tensor whose size depends on the data, and the step returns "
                    "it", _DYNAMIC_FIX,
                )
