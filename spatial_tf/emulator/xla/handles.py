"""Variables a step reaches only through their resource handle.

Legacy ``tf_keras`` optimizers update ``iterations`` and their slots with raw resource
ops (``assign_add(..., read_value=False)``), so the traced function captures the
variable's handle without listing the variable. ``HandleVariable`` stands for such a
variable: it reads and writes through the handle, with the dtype and shape the handle
records, so the emulator treats it like any other variable.

>>> import tensorflow as tf
>>> v = tf.Variable([1.0, 2.0])
>>> h = HandleVariable.from_handle(v.handle)
>>> h.numpy().tolist(), h.dtype.name, h.shape.as_list()
([1.0, 2.0], 'float32', [2])
>>> _ = h.assign([3.0, 4.0]); v.numpy().tolist()
[3.0, 4.0]
"""
import tensorflow as tf

from spatial_tf._tf_internals import handle_data

__all__ = ["HandleVariable", "is_variable"]


def is_variable(x):
    """A ``tf.Variable`` or a ``HandleVariable``."""
    return isinstance(x, (tf.Variable, HandleVariable))


class HandleVariable:
    """A variable known by its resource handle only (see the module docstring)."""

    aggregation = tf.VariableAggregation.NONE

    def __init__(self, handle, dtype, shape):
        self.handle = handle
        self.dtype = tf.as_dtype(dtype)
        self.shape = tf.TensorShape(shape)
        self.name = f"variable reached by handle ({_handle_name(handle)})"

    @classmethod
    def from_handle(cls, handle):
        """The variable behind ``handle``, or None if it is no variable (a table...)."""
        data = handle_data(handle)
        if data is None or not data.is_set or not data.shape_and_type:
            return None
        shape_and_type = data.shape_and_type[0]
        shape = None if shape_and_type.shape.unknown_rank else [
            d.size for d in shape_and_type.shape.dim
        ]
        return cls(handle, shape_and_type.dtype, shape)

    def read_value(self):
        return tf.raw_ops.ReadVariableOp(resource=self.handle, dtype=self.dtype)

    def numpy(self):
        return self.read_value().numpy()

    def assign(self, value):
        value = tf.convert_to_tensor(value, dtype=self.dtype)
        return tf.raw_ops.AssignVariableOp(resource=self.handle, value=value)


def _handle_name(handle):
    text = repr(handle)
    start = text.find('name="')
    return text[start + 6:text.find('"', start + 6)] if start >= 0 else "resource"
