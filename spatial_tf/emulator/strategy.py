"""``Emulator``: stands where a custom training loop uses ``TPUStrategy``, on CPU.

Each step function is traced once per input signature with
``tf.function(jit_compile=True)``, its HLO (with the shardings ``spatial_tf.split`` adds)
compiled by XLA's SPMD partitioner for ``num_replicas x num_cores_per_replica`` virtual
CPU devices, and run there. Variables the step reads are passed in; variables it writes
are updated only after the whole step succeeded.

>>> import tensorflow as tf
>>> import spatial_tf
>>> emulator = Emulator(num_cores_per_replica=4)
>>> w = tf.Variable(tf.ones([3, 3, 2, 2]))
>>> def step(image):
...     image = spatial_tf.split(image, [1, 2, 2, 1])
...     y = tf.nn.conv2d(image, w, 1, "SAME")
...     w.assign_sub(0.01 * tf.ones_like(w))
...     return tf.reduce_sum(y)
>>> float(emulator.run(step, args=(tf.ones([1, 8, 8, 2]),)))
1936.0
>>> round(float(w[0, 0, 0, 0]), 2)
0.99

Inside ``@tf.function def train_step(it): return emulator.run(step_fn, args=(next(it),))``
the step is compiled while ``train_step`` is traced and runs as one host call per step.
"""
import contextlib
import logging
import time

import numpy as np
import tensorflow as tf

from spatial_tf import context
from spatial_tf.annotate import annotate_tensor
from spatial_tf.emulator import _xla, datasets, replicas
from spatial_tf.emulator.executable import Program
from spatial_tf.emulator.trace import CallSignature, trace
from spatial_tf.spec import Replicate, check_num_cores_per_replica, validate

__all__ = ["Emulator"]

_log = logging.getLogger("spatial_tf")


class _Step:
    """One step function traced for one call signature, with its compiled programs."""

    def __init__(self, emulator, fn, signature):
        start = time.perf_counter()
        with context.logical_device_scope(emulator):
            self.traced = trace(fn, signature=signature)
        self.trace_seconds = time.perf_counter() - start
        self.fn = fn  # keeps fn alive while its id is part of a cache key
        self._emulator = emulator
        self.program = Program(
            self.traced, emulator.num_devices, hlo=emulator._partitioned_hlo(self.traced),
            compiler_options=emulator.compiler_options,
        )
        self._unpartitioned = None

    @property
    def unpartitioned(self):
        """The same step compiled for one device (sharding annotations have no effect)."""
        if self._unpartitioned is None:
            self._unpartitioned = Program(
                self.traced, 1, compiler_options=self._emulator.compiler_options
            )
        return self._unpartitioned


class Emulator:
    """Run partitioned step functions on virtual CPU devices, shaped like ``TPUStrategy``.

    Args:
      num_cores_per_replica: logical cores each replica's program is split over
        (1, 2, 4, ..., 128), as ``spatial_tf.split`` specs and TPUConfig count them.
      num_replicas: data-parallel replicas. The emulator compiles ONE program for all
        ``num_replicas * num_cores_per_replica`` devices: the step function receives the
        global batch, whose axis 0 XLA additionally splits over the replicas, and
        gradient sums become all-reduces inside that program. Batch statistics (batch
        norm) are therefore over the global batch; average losses over the global
        batch (``tf.nn.compute_average_loss``) as on TPU.
      compiler_options: XLA debug options by name for every compile, e.g.
        ``{"xla_cpu_enable_fast_math": True}``.

    Raises:
      ImportError: jax/jaxlib are missing (``pip install "spatial-tf[emulator]"``).
      RuntimeError: jax already runs with fewer CPU devices than needed.
    """

    def __init__(self, num_cores_per_replica=8, num_replicas=1, *, compiler_options=None):
        self.num_cores_per_replica = check_num_cores_per_replica(num_cores_per_replica)
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, (int, np.integer)):
            raise TypeError(
                f"num_replicas is {num_replicas!r} ({type(num_replicas).__name__}); "
                f"expected a positive int, e.g. num_replicas=1."
            )
        if num_replicas < 1:
            raise ValueError(f"num_replicas is {num_replicas}; expected a positive int.")
        self.num_replicas = int(num_replicas)
        if compiler_options is not None and not isinstance(compiler_options, dict):
            raise TypeError(
                f"compiler_options is {type(compiler_options).__name__}; expected a dict of "
                f"XLA options by name, e.g. {{'xla_cpu_enable_fast_math': True}}."
            )
        self.compiler_options = dict(compiler_options or {})
        self.devices = _xla.cpu_devices(self.num_devices)
        self._steps = {}
        self._warned = set()

    def __repr__(self):
        return (
            f"Emulator(num_cores_per_replica={self.num_cores_per_replica}, "
            f"num_replicas={self.num_replicas})"
        )

    @property
    def num_devices(self):
        """Virtual CPU devices the programs run on: replicas x cores per replica."""
        return self.num_replicas * self.num_cores_per_replica

    @property
    def num_replicas_in_sync(self):
        return self.num_replicas

    # ------------------------------------------------------------ running steps

    @contextlib.contextmanager
    def scope(self):
        """While active, ``spatial_tf.split`` annotates for this emulator's cores."""
        with context.logical_device_scope(self):
            yield self

    def run(self, fn, args=(), kwargs=None, options=None):
        """Run ``fn(*args, **kwargs)`` partitioned; return its outputs as ``tf.Tensor`` s.

        Eagerly, the step runs now. While an outer ``tf.function`` is traced, the step
        is compiled now and embedded as a host call that runs at every call of the
        outer function; variables are read before it and written after it succeeds.
        The outer function itself must not be ``jit_compile=True``.
        """
        self._ignored(options, "run(options=...)")
        signature = CallSignature(args, kwargs)
        step = self.compile(fn, signature=signature)
        with context.logical_device_scope(self):
            if tf.executing_eagerly():
                return self._run_now(step, signature)
            return self._run_in_graph(step, signature)

    def compile(self, fn, args=(), kwargs=None, *, signature=None):
        """Trace and compile ``fn`` for these arguments (cached); return the step.

        The result has ``traced``, ``program`` (with ``compile_seconds``) and
        ``trace_seconds``; ``run`` calls this, so calling it first only moves the
        compile time out of the first step.
        """
        signature = signature or CallSignature(args, kwargs)
        key = (_fn_key(fn), signature.key)
        step = self._steps.get(key)
        if step is None:
            step = _Step(self, fn, signature)
            self._steps[key] = step
        return step

    def _partitioned_hlo(self, traced):
        if self.num_replicas == 1:
            return traced.hlo
        return replicas.compose(traced, self.num_replicas, self.num_cores_per_replica)

    def _run_now(self, step, signature):
        traced = step.traced
        values = [t.numpy() if hasattr(t, "numpy") else np.asarray(t) for t in signature.tensors]
        outputs, updates = step.program.execute(values, traced.capture_values())
        for var, value in zip(traced.written_variables, updates):
            var.assign(value)
        return traced.pack_outputs(
            [tf.convert_to_tensor(o, dtype=s.dtype) for o, s in zip(outputs, traced.output_specs)]
        )

    def _run_in_graph(self, step, signature):
        traced = step.traced
        written = traced.written_variables
        specs = list(traced.output_specs) + [tf.TensorSpec(v.shape, v.dtype) for v in written]
        num_args = len(traced.arg_specs)
        captures = [
            c.read_value() if isinstance(c, tf.Variable) else tf.constant(c)
            for c in traced.captures
        ]

        def host_call(*arrays):
            outputs, updates = step.program.execute(arrays[:num_args], arrays[num_args:])
            done = np.zeros((), np.int32)  # so that a step with no results still runs
            return [
                np.asarray(a, dtype=s.dtype.as_numpy_dtype)
                for a, s in zip(outputs + updates, specs)
            ] + [done]

        results = tf.numpy_function(
            host_call, list(signature.tensors) + captures, [s.dtype for s in specs] + [tf.int32],
            stateful=True, name=f"emulated_{_graph_name(traced.name)}",
        )
        done = results.pop()
        for r, s in zip(results, specs):
            r.set_shape(s.shape)
        outputs, updates = results[: len(traced.output_specs)], results[len(traced.output_specs):]
        assigns = [var.assign(value) for var, value in zip(written, updates)]
        with tf.control_dependencies(assigns + [done]):
            outputs = [tf.identity(o) for o in outputs]
        return traced.pack_outputs(outputs)

    # ------------------------------------------------------------ results and inputs

    def reduce(self, reduce_op, value, axis=None):
        """Combine a ``run`` result over replicas (and along ``axis`` if given).

        ``run`` already returns the whole program's value, the same on every replica,
        so with ``axis=None`` this returns ``value``; with an axis it sums or averages
        along it, as ``TPUStrategy.reduce`` does.
        """
        op = _reduce_op(reduce_op)
        if axis is None:
            return value
        fn = tf.reduce_sum if op == tf.distribute.ReduceOp.SUM else tf.reduce_mean
        return tf.nest.map_structure(lambda v: fn(v, axis=axis), value)

    def experimental_local_results(self, value):
        """``(value,)``: one program, so one local result."""
        return (value,)

    def experimental_distribute_dataset(self, dataset, options=None):
        """The dataset itself: each element is the global batch the step receives."""
        self._ignored(options, "experimental_distribute_dataset(options=...)")
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(
                f"experimental_distribute_dataset: dataset is {type(dataset).__name__}; "
                f"expected a tf.data.Dataset."
            )
        datasets.check_global_batch(dataset.element_spec, self.num_replicas)
        return dataset

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """Call ``dataset_fn(input_context)`` once; join per-replica batches into global ones."""
        self._ignored(options, "distribute_datasets_from_function(options=...)")
        ctx = tf.distribute.InputContext(
            num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=self.num_replicas
        )
        dataset = dataset_fn(ctx)
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(
                f"distribute_datasets_from_function: dataset_fn returned "
                f"{type(dataset).__name__}; expected a tf.data.Dataset."
            )
        return datasets.rebatch_per_replica(dataset, self.num_replicas)

    # ------------------------------------------------------------ logical devices

    def experimental_split_to_logical_devices(self, tensor, partition_dimensions):
        """Annotate ``tensor`` to be split ``partition_dimensions`` ways (product = cores)."""
        dims = list(partition_dimensions)
        product = int(np.prod(dims)) if dims else 1
        if product != self.num_cores_per_replica:
            raise ValueError(
                f"experimental_split_to_logical_devices: the product of "
                f"partition_dimensions={dims} is {product}; expected "
                f"num_cores_per_replica={self.num_cores_per_replica}, as TPUStrategy "
                f"requires. Fix: split over all cores, or use "
                f"experimental_replicate_to_logical_devices."
            )
        leaf = validate(dims, tensor, self.num_cores_per_replica)
        return annotate_tensor(tensor, leaf, self.num_cores_per_replica)

    def experimental_replicate_to_logical_devices(self, tensor):
        """Annotate ``tensor`` to be held whole by every core of the replica."""
        return annotate_tensor(tensor, Replicate(), self.num_cores_per_replica)

    def experimental_assign_to_logical_device(self, tensor, logical_device_id):
        """Refused, as ``TPUStrategy`` refuses it in SPMD mode (see docs/emulator.md)."""
        raise ValueError(
            f"experimental_assign_to_logical_device(..., {logical_device_id!r}): "
            f"TPUStrategy refuses to assign a tensor to one logical device in SPMD mode, "
            f"and the emulator runs XLA's SPMD partitioner. Fix: use "
            f"experimental_replicate_to_logical_devices (no communication), or split the "
            f"tensor like the activations it meets."
        )

    # ------------------------------------------------------------ inspection

    def report(self, fn, args=(), kwargs=None, *, gather_threshold_bytes=None):
        """Per-core memory and communication of the partitioned step; see ``Report``.

        Gathered tensors of at least ``gather_threshold_bytes`` per core get a warning
        (default: an eighth of the smallest per-core piece of a split argument).
        """
        from spatial_tf.emulator.report import build_report

        return build_report(self, self.compile(fn, args, kwargs), gather_threshold_bytes)

    def compare(self, fn, args=(), kwargs=None, *, reference="unpartitioned",
                tolerances=None, raise_on_mismatch=False):
        """Run partitioned and as ``reference`` (``"unpartitioned"`` XLA or
        ``"tensorflow"``) from the same variable values and compare every output and
        variable update; variables are left unchanged. See ``parity.compare``.
        """
        from spatial_tf.emulator.parity import compare

        return compare(self, fn, args, kwargs, reference=reference, tolerances=tolerances,
                       raise_on_mismatch=raise_on_mismatch)

    def _ignored(self, value, what):
        if value is None or what in self._warned:
            return
        self._warned.add(what)
        _log.warning(
            "spatial_tf.Emulator: %s=%r has no effect on the CPU emulator and is ignored.",
            what, value,
        )


def _fn_key(fn):
    try:
        hash(fn)
    except TypeError:
        return ("id", id(fn))
    return fn


def _graph_name(name):
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in name)


def _reduce_op(reduce_op):
    if isinstance(reduce_op, str):
        try:
            return tf.distribute.ReduceOp(reduce_op.upper())
        except ValueError:
            pass
    elif isinstance(reduce_op, tf.distribute.ReduceOp):
        return reduce_op
    raise ValueError(
        f"reduce: reduce_op is {reduce_op!r}; expected tf.distribute.ReduceOp.SUM or "
        f"MEAN (or the strings 'SUM' / 'MEAN')."
    )
