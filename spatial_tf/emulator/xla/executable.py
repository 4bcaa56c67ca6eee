"""A traced step compiled for a number of cores, run on NumPy values.

``Program(traced, num_partitions)`` hands the traced HLO to XLA (the SPMD partitioner
splits it over ``num_partitions`` virtual CPU devices when that is more than one);
``execute`` places the arguments and captured values per the shardings XLA chose, runs
the program and returns the function's outputs and the new values of the variables it
writes, as whole (reassembled) NumPy arrays. Nothing is written to any variable here.

>>> import tensorflow as tf
>>> from spatial_tf.emulator.compile.trace import trace
>>> traced = trace(lambda x: tf.reduce_sum(x * 2.0), (tf.ones([4, 4]),), {})
>>> program = Program(traced, num_partitions=2)
>>> outputs, updates = program.execute([np.ones([4, 4], np.float32)], [])
>>> float(outputs[0]), updates
(32.0, [])
"""
import re
import time

import numpy as np

from spatial_tf import logs
from spatial_tf.emulator.xla import _xla, precision, replicas
from spatial_tf.emulator.xla.errors import CompileError
from spatial_tf.table import plural

__all__ = ["Program", "compile_error", "MEMORY_KINDS", "with_peak"]


MEMORY_KINDS = ("argument", "output", "alias", "temp")


def with_peak(stats):
    """``stats``' bytes by kind (``MEMORY_KINDS``) and ``peak``: what one core holds at
    once, arguments and outputs (less the outputs written in place of arguments) and temp.
    The one memory formula of the package, for the emulator's programs and the TPU
    compiler's alike.

    >>> with_peak({"argument": 10, "output": 4, "alias": 3, "temp": 5, "code": 99})
    {'argument': 10, 'output': 4, 'alias': 3, 'temp': 5, 'peak': 16}
    """
    out = {k: int(stats[k]) for k in MEMORY_KINDS}
    out["peak"] = out["argument"] + out["output"] - out["alias"] + out["temp"]
    return out


class Program:
    """``traced`` compiled for ``num_partitions`` cores (1 = unpartitioned) per replica.

    With ``num_replicas > 1`` the program runs once per replica, each on its own
    arguments, joined by the step's cross-replica all-reduces (``replicas.py``).

    With ``float64``, float32 values are computed in float64 (``precision.py``): inputs are
    widened and results come back as float64.

    Attributes:
      compile_seconds: wall time XLA took to compile.
      compiled: the ``_xla.Compiled`` executable (memory stats, partitioned HLO text).
    """

    def __init__(self, traced, num_partitions, *, num_replicas=1, compiler_options=None,
                 float64=False):
        self.traced = traced
        self.num_partitions = num_partitions
        self.num_replicas = num_replicas
        self.float64 = float64  # float32 computed in float64 (precision.py)
        start = time.perf_counter()
        try:
            with logs.quiet():  # XLA's GSPMD / Shardy notices are not the user's business
                self.compiled = _xla.compile_module(
                    replicas.prepare(
                        precision.to_float64(traced.hlo) if float64 else traced.hlo,
                        num_replicas,
                    ),
                    num_partitions,
                    compiler_options=compiler_options, num_replicas=num_replicas,
                    # captured variables and constants whole on every core, as on a TPU
                    whole_parameters=range(len(traced.arg_specs),
                                           len(traced.arg_specs) + len(traced.captures)),
                    whole_results=[r for r, _ in traced.writes],
                )
        except RuntimeError as e:  # jaxlib's XlaRuntimeError, among others
            error = compile_error(traced.name, num_partitions, e)
            if error is None:
                raise  # not a rejected program (XLA internal, out of memory, devices): as is
            raise error from e
        self.compile_seconds = time.perf_counter() - start

    def memory(self):
        """Per-core bytes: argument, output, alias (outputs written in place of
        arguments), temp, and peak = argument + output - alias + temp."""
        return with_peak(self.compiled.memory_stats())

    def execute(self, arg_values, capture_values):
        """Run one replica's program once; return ``(outputs, updates)`` as lists of
        NumPy arrays.

        ``arg_values`` are the tensor arguments in ``traced.arg_specs`` order,
        ``capture_values`` the captured values in ``traced.captures`` order; ``updates``
        follow ``traced.writes``.
        """
        if self.num_replicas != 1:
            raise ValueError(
                f"{self.traced.name}: this program runs {self.num_replicas} replicas; "
                f"call execute_replicas with one list of arguments per replica."
            )
        outputs, updates = self.execute_replicas([arg_values], capture_values)
        return outputs[0], updates[0]

    def execute_replicas(self, per_replica_args, capture_values, replica_captures=None):
        """Run every replica once; ``per_replica_args[r]`` are replica ``r``'s tensor
        arguments, ``capture_values`` the captured values every replica reads, except
        ``replica_captures[i][r]``: replica ``r``'s own value of capture ``i`` (an
        ON_READ variable). Returns ``(outputs, updates)``: one list per replica each, the
        updates being each replica's new values of the variables it writes.
        """
        traced = self.traced
        captures = [np.asarray(v) for v in capture_values]
        per_replica = []
        for r, arg_values in enumerate(per_replica_args):
            own = list(captures)
            for i, values in (replica_captures or {}).items():
                own[i] = np.asarray(values[r])
            arrays = [
                np.asarray(v, dtype=spec.dtype.as_numpy_dtype)
                for v, spec in zip(arg_values, traced.arg_specs)
            ] + own
            _check_arrays(traced, arrays)
            if self.float64:
                arrays = precision.widen(arrays)
            per_replica.append(arrays)
        if self.num_replicas == 1:
            results = [self.compiled.run(per_replica[0], traced.result_shapes)]
        else:
            results = self.compiled.run_replicas(per_replica)
        outputs = [[r[i] for i in traced.output_indices] for r in results]
        updates = [[r[i] for i, _ in traced.writes] for r in results]
        return outputs, updates


# XLA status codes with which a compiler rejects the program it was given; any other
# (INTERNAL, RESOURCE_EXHAUSTED, UNKNOWN, ...) is a failure of XLA or of the machine.
_REJECTED = ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "OUT_OF_RANGE", "UNIMPLEMENTED")
_STATUS = re.compile(r"^\s*([A-Z_]+): ")


def compile_error(function, num_partitions, error):
    """A ``CompileError`` when XLA rejected the program, else None (pass ``error`` on).

    Only a message that names a sharding points at the ``split`` specs.

    >>> e = RuntimeError("INVALID_ARGUMENT: Invalid sharding for instruction: %x")
    >>> print(compile_error("step", 2, e))  # doctest: +NORMALIZE_WHITESPACE
    step: XLA could not compile the step for 2 cores: INVALID_ARGUMENT: Invalid sharding
    for instruction: %x. Fix: check the sharding annotations (spatial_tf.split specs)
    against the tensors they annotate; the full XLA message is chained below.
    >>> e = RuntimeError("UNIMPLEMENTED: Asked to propagate a dynamic dimension from hlo mul")
    >>> print(compile_error("step", 2, e))  # doctest: +ELLIPSIS
    step: XLA could not compile ... Fix: a size that depends on the data (tf.boolean_mask...
    >>> compile_error("step", 2, RuntimeError("INTERNAL: Failed to allocate")) is None
    True
    """
    text = str(error).strip()
    status = _STATUS.match(text)
    if status is None or status.group(1) not in _REJECTED:
        return None
    first = text.splitlines()[0]
    if "dynamic dimension" in text:
        fix = (
            "a size that depends on the data (tf.boolean_mask, tf.where with one "
            "argument, tf.unique) reaches an instruction the SPMD partitioner turns into "
            "communication, and XLA cannot carry such a size through it; TPUStrategy "
            "compiles with the same partitioner (not verified on a TPU). Keep the size "
            "fixed instead, e.g. tf.reduce_sum(x * mask) for "
            "tf.reduce_sum(tf.boolean_mask(x, mask)); the full XLA message, chained "
            "below, names the instructions"
        )
    elif "sharding" in text.lower():
        fix = (
            "check the sharding annotations (spatial_tf.split specs) against the tensors "
            "they annotate; the full XLA message is chained below"
        )
    else:
        fix = (
            "the full XLA message is chained below; its metadata op_name names the "
            "TensorFlow op of the instruction XLA rejected"
        )
    return CompileError(
        f"{function}: XLA could not compile the step for {plural(num_partitions, 'core')}: "
        f"{first}. Fix: {fix}.",
        function=function,
    )


def _check_arrays(traced, arrays):
    """XLA trusts its inputs: check shapes and dtypes here rather than crash there."""
    names = [f"argument {i}" for i in range(len(traced.arg_specs))] + [
        f"variable '{c.name}'" if hasattr(c, "name") else f"captured constant {i}"
        for i, c in enumerate(traced.captures)
    ]
    for name, array, (shape, dtype) in zip(names, arrays, traced.parameter_types):
        if array.shape != shape or (dtype is not None and array.dtype.name != dtype):
            raise ValueError(
                f"{traced.name}: {name} is {array.dtype.name}{list(array.shape)} but the step "
                f"was compiled for {dtype}{list(shape)}. Fix: keep the shapes and dtypes of "
                f"variables fixed between steps (a new shape needs a new trace)."
            )
