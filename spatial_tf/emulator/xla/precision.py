"""The same program in float64: a reference that rounding cannot blur.

``to_float64(hlo)`` rewrites a serialized ``HloModuleProto`` so that every float32
value (parameters, constants, intermediates, results) is float64; the computation is
otherwise unchanged. Compiled partitioned and unpartitioned, the two float64 programs of
a correctly partitioned step agree to about 1e-12, while in float32 ill-conditioned
results (gradients through batch norm over a few values) can differ by percents between
two equally valid evaluations. ``parity.compare`` uses it to tell rounding from error.

>>> import tensorflow as tf
>>> from spatial_tf.emulator.compile.trace import trace
>>> traced = trace(lambda x: tf.reduce_sum(x * 0.1), (tf.ones([4]),), {})
>>> module = hlo_pb2.HloModuleProto.FromString(to_float64(traced.hlo))
>>> module.host_program_shape.parameters[0].element_type == F64
True
"""
import numpy as np

from spatial_tf._tf_internals import hlo_pb2, xla_data_pb2

__all__ = ["to_float64", "F64"]

F32, F64 = xla_data_pb2.F32, xla_data_pb2.F64


def _shape(shape):
    if shape.element_type == F32:
        shape.element_type = F64
    for element in shape.tuple_shapes:
        _shape(element)


def _program_shape(program_shape):
    for p in program_shape.parameters:
        _shape(p)
    _shape(program_shape.result)


def _literal(literal):
    if literal.shape.element_type == F32:
        values = list(literal.f32s)
        literal.ClearField("f32s")
        literal.f64s.extend(values)
    _shape(literal.shape)
    for element in literal.tuple_literals:
        _literal(element)


def to_float64(hlo):
    """Serialized ``hlo`` with float32 replaced by float64 everywhere."""
    module = hlo_pb2.HloModuleProto.FromString(hlo)
    _program_shape(module.host_program_shape)
    for computation in module.computations:
        _program_shape(computation.program_shape)
        for instruction in computation.instructions:
            _shape(instruction.shape)
            if instruction.HasField("literal"):
                _literal(instruction.literal)
    return module.SerializeToString()


def widen(values):
    """NumPy values with float32 arrays as float64 (the float64 program's inputs)."""
    return [np.asarray(v, np.float64) if np.asarray(v).dtype == np.float32 else v
            for v in values]
