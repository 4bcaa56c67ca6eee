"""``Emulator``: a ``tf.distribute`` strategy that runs TPU-style steps on CPU.

It stands where a training loop uses ``TPUStrategy``: inside ``emulator.scope()`` it is
the current strategy (``tf.distribute.get_strategy()``, Keras, orbit see it), and
``run`` traces the step function once, as one replica's program, with
``tf.function(jit_compile=True)``, compiles its HLO (with the shardings
``spatial_tf.split`` adds) with XLA's SPMD partitioner for ``num_cores_per_replica``
virtual CPU devices per replica, and runs every replica. Variables the step reads are
passed in; variables it writes are updated only after the whole step succeeded.

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
import collections
import functools
import logging
import time
import warnings
import weakref
from typing import (TYPE_CHECKING, Any, Callable, Dict, Hashable, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import numpy as np
import tensorflow as tf

from spatial_tf import context
from spatial_tf.checks import CORE_COUNTS, check_int
from spatial_tf.annotate import annotate_tensor
from spatial_tf.emulator.compile.compiled import CompiledStep, Lowered
from spatial_tf.emulator.compile.trace import CallSignature, trace
from spatial_tf.emulator.distribute import hosts, pieces, runner, variables
from spatial_tf.emulator.distribute.extended import EmulatorExtended
from spatial_tf.emulator.distribute.replica import EmulatedReplicaContext, tracing
from spatial_tf.emulator.xla import _xla
from spatial_tf.spec import Replicate, check_num_cores_per_replica, validate
from spatial_tf.table import plural

if TYPE_CHECKING:  # annotations only: diagnosis and the TPU target load on first use
    from spatial_tf.emulator.diagnose.parity import Comparison
    from spatial_tf.emulator.diagnose.report import Report
    from spatial_tf.emulator.tpu.compiled_step import TpuCompiledStep

__all__ = ["Emulator", "UnsplitStepWarning"]


class UnsplitStepWarning(UserWarning):
    """A step run on several cores per replica has no split in it: it runs replicated."""

_log = logging.getLogger("spatial_tf")

# compiled steps kept per emulator (least recently used dropped first)
MAX_CACHED_STEPS = 64


def _host_layout(cores, num_replicas, num_hosts, topology):
    """The emulator's ``HostLayout`` from its arguments, each checked."""
    if num_replicas is not None:
        num_replicas = check_int(
            num_replicas, "num_replicas",
            "num_replicas=1 for one replica, or the data-parallel replicas of the pod slice "
            "you plan for", where="Emulator",
        )
    if num_hosts is not None:
        num_hosts = check_int(
            num_hosts, "num_hosts", "num_hosts=1, or the hosts of the pod slice you plan for",
            where="Emulator",
        )
    if topology is not None:
        layout = hosts.topology_layout(topology, cores, num_replicas)
        if num_hosts is not None and num_hosts != layout.num_hosts:
            fed = len(layout.pipeline_of_replica)
            raise ValueError(
                f"Emulator: num_hosts={num_hosts} but on {layout.slice_name} "
                f"{plural(fed, 'replica')} of {plural(cores, 'core')} "
                f"{'is' if fed == 1 else 'are'} fed by {plural(layout.num_hosts, 'host')}. "
                f"Fix: leave num_hosts out when giving topology (it follows from the slice), "
                f"or pass num_hosts={layout.num_hosts}."
            )
        return layout
    num_replicas = 1 if num_replicas is None else num_replicas
    num_hosts = 1 if num_hosts is None else num_hosts
    if num_replicas % num_hosts:
        raise ValueError(
            f"Emulator: num_hosts={num_hosts} does not divide num_replicas="
            f"{num_replicas}; expected every host to feed the same number of replicas, "
            f"as on a TPU slice. Fix: num_hosts a divisor of {num_replicas}, e.g. "
            f"num_hosts={max(d for d in range(1, num_hosts + 1) if num_replicas % d == 0)}."
        )
    return hosts.even_layout(num_replicas, num_hosts)


class Emulator(tf.distribute.Strategy, context.EmulatedLayout):
    """``TPUStrategy`` on virtual CPU devices, partitioned by XLA's SPMD partitioner.

    Args:
      num_cores_per_replica: logical cores each replica's program is split over
        (1, 2, 4, ..., 128), as ``spatial_tf.split`` specs and TPUConfig count them.
      num_replicas: data-parallel replicas (default 1; with ``topology``, all the
        slice holds), as on a pod slice. Each replica's step sees
        its own batch (``global_batch / num_replicas`` from the emulator's datasets),
        ``tf.distribute.get_replica_context()`` is a real replica context whose
        ``all_reduce`` sums across replicas inside the compiled program, and ``run``
        returns per-replica values (plain tensors when ``num_replicas == 1``).
      num_hosts: TPU hosts the replicas are spread over, as on a pod slice: each host
        has its own input pipeline (``distribute_datasets_from_function`` calls
        ``dataset_fn`` once per host; ``experimental_distribute_dataset`` shards the
        dataset across hosts by its auto-shard policy), and replica ``r`` is fed by host
        ``r // (num_replicas // num_hosts)``. Must divide ``num_replicas``.
      topology: a slice name such as ``"v4-32"`` (or a ``tf.tpu.experimental.Topology``)
        to emulate as ``spatial_tf.tpu_strategy`` would build it there: replicas (all
        the slice holds unless ``num_replicas`` is given), hosts and which host feeds
        which replica follow from its ``DeviceAssignment``; ``describe`` shows them.
      compiler_options: XLA debug options by name for every compile, e.g.
        ``{"xla_cpu_enable_fast_math": True}``.
      target: a TPU generation or slice (``"v3"``, ``"v5e"``, ``"v4-8"``): ``report``
        then also compiles each step with XLA's TPU compiler for it (libtpu, no TPU
        needed) and shows that TPU's per-core memory and HBM verdict beside XLA:CPU's.
        Steps still run on CPU.

    >>> Emulator(2, topology="v4-32")
    Emulator(num_cores_per_replica=2, num_replicas=8, num_hosts=4, topology='v4-32')

    Raises:
      ImportError: jax/jaxlib are missing (``pip install "spatial-tf[emulator]"``).
      RuntimeError: jax already runs with fewer CPU devices than needed.
      ValueError: an unknown ``target``; ``TpuCompilerUnavailable`` (an ImportError):
        a ``target`` without libtpu installed.
    """

    def __init__(self, num_cores_per_replica: int = 8, num_replicas: Optional[int] = None, *,
                 num_hosts: Optional[int] = None, topology: Any = None,
                 compiler_options: Optional[Dict[str, Any]] = None,
                 target: Optional[str] = None) -> None:
        self.num_cores_per_replica = check_num_cores_per_replica(num_cores_per_replica)
        self.target = _checked_target(target, self.num_cores_per_replica)
        self.host_layout = _host_layout(self.num_cores_per_replica, num_replicas, num_hosts,
                                        topology)
        if compiler_options is not None and not isinstance(compiler_options, dict):
            raise TypeError(
                f"Emulator: compiler_options is {type(compiler_options).__name__}; expected "
                f"a dict of XLA options by name. Fix: e.g. "
                f"{{'xla_cpu_enable_fast_math': True}}."
            )
        self.num_replicas = len(self.host_layout.pipeline_of_replica)
        self.num_hosts = self.host_layout.num_hosts
        self.compiler_options = dict(compiler_options or {})
        self.devices = _xla.cpu_devices(self.num_replicas * self.num_cores_per_replica)
        super().__init__(EmulatorExtended(self, self.host_layout))
        self._steps: "collections.OrderedDict[Any, Lowered]" = collections.OrderedDict()
        self._warned: set = set()
        # the distributed variables made in the scope, each with a copy per replica
        self.replica_copies = variables.ReplicaCopies()

    def __repr__(self) -> str:
        return (
            f"Emulator(num_cores_per_replica={self.num_cores_per_replica}, "
            f"num_replicas={self.num_replicas}"
            + (f", num_hosts={self.num_hosts}" if self.num_hosts > 1 else "")
            + (f", topology={self.host_layout.slice_name!r}"
               if self.host_layout.device_assignment is not None else "")
            + (f", target={self.target.name!r}" if self.target is not None else "") + ")"
        )

    @property
    def num_devices(self) -> int:
        """Virtual CPU devices the programs run on: replicas x cores per replica."""
        return self.num_replicas * self.num_cores_per_replica

    # ------------------------------------------------------------ running steps

    def run(self, fn: Callable, args: Sequence = (), kwargs: Optional[Mapping[str, Any]] = None,
            options: Any = None) -> Any:
        """Run ``fn(*args, **kwargs)`` on every replica, partitioned; return its outputs.

        Per-replica values among the arguments give each replica its own component;
        other arguments go to every replica. With several replicas each output is a
        per-replica value (``experimental_local_results`` lists them). Eagerly, the step
        runs now. While an outer ``tf.function`` is traced, the step is compiled now and
        embedded as a host call that runs at every call of the outer function; variables
        are read before it and written after it succeeds. The outer function itself must
        not be ``jit_compile=True`` (a ``RuntimeError`` says so; the step function may be).
        Per-replica Python numbers reach the step as tensors, as under TPUStrategy.
        """
        self._ignored(options, "run(options=...)")
        with self.scope():
            return runner.run(self, fn, args or (), kwargs)

    def lower(self, fn: Callable, args: Sequence = (), kwargs: Optional[Mapping[str, Any]] = None,
              *, signature: Optional[CallSignature] = None) -> Lowered:
        """Trace ``fn`` for these (one replica's) arguments into an XLA program; see
        ``spatial_tf.emulator.compile.compiled``. ``.compile()`` on the result compiles it.
        A tensor argument may be a ``tf.TensorSpec`` (``run`` needs values).

        Lowered steps are cached per function and argument signature (the cache holds
        no reference to the function; the last 64 are kept), and so are their compiles;
        after ``partition_friendly`` (or another spatial_tf call that changes a model in
        place) every step is traced again.
        """
        signature = signature or CallSignature(args, kwargs)
        # a model changed in place since (partition_friendly) makes the step new
        key = (_FunctionKey(fn), signature.key, context.model_changes())
        lowered = self._steps.get(key)
        if lowered is None:
            start = time.perf_counter()
            with tracing(self):
                traced = trace(fn, signature=signature,
                               context=lambda: EmulatedReplicaContext(self))
            lowered = Lowered(self, traced, time.perf_counter() - start, build_report)
            self._steps[key] = lowered
            self._warn_if_unsplit(fn, traced)
            while len(self._steps) > MAX_CACHED_STEPS:
                self._steps.popitem(last=False)
        self._steps.move_to_end(key)
        return lowered

    def compile(self, fn: Callable, args: Sequence = (),
                kwargs: Optional[Mapping[str, Any]] = None, *,
                signature: Optional[CallSignature] = None,
                target: Optional[str] = None) -> Union[CompiledStep, "TpuCompiledStep"]:
        """``lower(fn, args, kwargs).compile(target)``: the step partitioned and compiled,
        not run.

        The result (a ``CompiledStep``) gives memory per core (``memory()``), the
        collectives with the TensorFlow op behind each (``collectives()``), the
        partitioned HLO (``hlo_text()``) and ``report()``; ``run`` calls this, so calling
        it first only moves the compile time out of the first step. With ``target`` (a
        TPU generation such as ``"v3"``), XLA's TPU compiler compiles it for that TPU
        instead (a ``TpuCompiledStep``: the TPU's memory per core and HBM verdict).
        """
        return self.lower(fn, args, kwargs, signature=signature).compile(target)

    def _warn_if_unsplit(self, fn, traced):
        """Warn once per step name when a step for several cores has no annotation at all."""
        if self.num_cores_per_replica == 1 or _has_sharding(traced.module):
            return
        name = _step_name(fn, traced.name)
        if not self.first_warning(("unsplit", name)):
            return
        warnings.warn(
            f"spatial_tf.Emulator: the step {name} has no split in it, so each of the "
            f"{self.num_cores_per_replica} cores of a replica computes all of it (no memory "
            f"is saved). Fix: split the input, e.g. a spatial_tf.layers.Split([1, "
            f"{self.num_cores_per_replica}, 1, 1]) layer right after the model's input, or "
            f"spatial_tf.split(features, spec) at the start of the step.",
            UnsplitStepWarning, stacklevel=2)

    @property
    def compiled_steps(self) -> Tuple[CompiledStep, ...]:
        """The steps compiled so far (``CompiledStep`` s), least recently used first.

        Each has ``traced`` (``traced.name`` is the step function's), ``program``
        (``num_partitions``, ``compile_seconds``), ``trace_seconds``, ``memory()``,
        ``collectives()`` and ``report()``. This is how to inspect steps a framework
        handed to ``run`` (orbit, Keras ``fit``).

        >>> import tensorflow as tf
        >>> emulator = Emulator(num_cores_per_replica=2)
        >>> def step_fn(x):
        ...     return tf.reduce_sum(emulator.experimental_split_to_logical_devices(x, [1, 2]))
        >>> float(emulator.run(step_fn, args=(tf.ones([2, 4]),)))
        8.0
        >>> [(s.traced.name, s.program.num_partitions) for s in emulator.compiled_steps]
        [('step_fn', 2)]
        """
        return tuple(lowered.compile() for lowered in self._steps.values()
                     if lowered.is_compiled)

    # ------------------------------------------------------------ results

    def reduce(self, reduce_op: Union[str, tf.distribute.ReduceOp], value: Any,
               axis: Optional[int] = None) -> Any:
        """Combine per-replica results: ``SUM`` or ``MEAN`` over replicas, and along
        ``axis`` of each result first if given, as ``TPUStrategy.reduce`` does."""
        op = _reduce_op(reduce_op)
        with self.scope():
            if axis is not None:
                # the mean over replicas of per-replica means along axis is the global
                # mean, since every replica has the same batch, as on a TPU
                fn = tf.reduce_sum if op == tf.distribute.ReduceOp.SUM else tf.reduce_mean
                value = tf.nest.map_structure(
                    lambda v: _map_local(self, v, lambda t: fn(t, axis=axis)), value
                )
            return tf.nest.map_structure(lambda v: self.extended.reduce_to(op, v, "/cpu:0"), value)

    # ------------------------------------------------------------ logical devices

    def experimental_split_to_logical_devices(self, tensor: tf.Tensor,
                                              partition_dimensions: Sequence[int]) -> tf.Tensor:
        """Annotate ``tensor`` to be split ``partition_dimensions`` ways (product = cores)."""
        dims = list(partition_dimensions)
        product = int(np.prod(dims)) if dims else 1
        if product != self.num_cores_per_replica:
            cores = self.num_cores_per_replica
            example, other = _product_hints(dims, product, cores, tensor)
            raise ValueError(
                f"experimental_split_to_logical_devices: the product of partition_dimensions="
                f"{dims} is {product}; expected num_cores_per_replica={cores}, as TPUStrategy "
                f"requires (the tensor has shape {tuple(tensor.shape)}). Fix: partition "
                f"dimensions whose product is {cores}{example} (in Model Garden: "
                f"task.train_input_partition_dims and eval_input_partition_dims),{other} or "
                f"experimental_replicate_to_logical_devices."
            )
        leaf = validate(tensor, dims, self.num_cores_per_replica)
        return annotate_tensor(tensor, leaf, self.num_cores_per_replica)

    def experimental_replicate_to_logical_devices(self, tensor: tf.Tensor) -> tf.Tensor:
        """Annotate ``tensor`` to be held whole by every core of the replica."""
        return annotate_tensor(tensor, Replicate(), self.num_cores_per_replica)

    def experimental_assign_to_logical_device(self, tensor: tf.Tensor,
                                              logical_device_id: int) -> tf.Tensor:
        """Refused, as ``TPUStrategy`` refuses it in SPMD mode (see docs/emulator.md)."""
        raise ValueError(
            f"experimental_assign_to_logical_device(..., {logical_device_id!r}): "
            f"TPUStrategy refuses to assign a tensor to one logical device in SPMD mode, "
            f"and the emulator runs XLA's SPMD partitioner. Fix: use "
            f"experimental_replicate_to_logical_devices (no communication), or split the "
            f"tensor like the activations it meets."
        )

    # ------------------------------------------------------------ inspection

    def report(self, fn: Callable, args: Sequence = (), kwargs: Optional[Mapping[str, Any]] = None,
               *, gather_threshold_bytes: Optional[int] = None,
               target: Optional[str] = None) -> "Report":
        """Per-core memory and communication of the partitioned step; see ``Report``.

        ``args`` are one replica's arguments; any tensor among them may be a
        ``tf.TensorSpec`` (nothing of its size is allocated). Gathered tensors of at least
        ``gather_threshold_bytes`` per core get a warning (default: an eighth of the
        smallest per-core piece of a split argument). ``target`` (default: the
        emulator's) adds that TPU's per-core memory and HBM verdict from XLA's TPU
        compiler beside XLA:CPU's.
        """
        target = self.target if target is None else _checked_target(
            target, self.num_cores_per_replica)
        lowered = self.lower(fn, args, kwargs)
        on_tpu = lowered.compile(target) if target is not None else None
        return build_report(lowered.compile(), gather_threshold_bytes, on_tpu)

    def compare(self, fn: Callable, args: Sequence = (),
                kwargs: Optional[Mapping[str, Any]] = None, *, reference: str = "unpartitioned",
                tolerances: Optional[Mapping[str, float]] = None,
                raise_on_mismatch: bool = False) -> "Comparison":
        """Run partitioned and as ``reference`` (``"unpartitioned"`` XLA or
        ``"tensorflow"``) from the same variable values and compare every output and
        variable update; variables are left unchanged. See ``parity.compare``.
        """
        from spatial_tf.emulator.diagnose.parity import compare

        return compare(self, fn, args, kwargs, reference=reference, tolerances=tolerances,
                       raise_on_mismatch=raise_on_mismatch)

    def first_warning(self, key: Hashable, condition: Callable[[], bool] = lambda: True) -> bool:
        """True the first time ``key`` is asked for while ``condition()`` holds: a warning
        given once per emulator (``("unsplit", step name)``, an ignored option, ...).
        ``condition`` is not called again once the warning was given."""
        if key in self._warned or not condition():
            return False
        self._warned.add(key)
        return True

    def _ignored(self, value, what):
        if value is None or not self.first_warning(what):
            return
        _log.warning(
            "spatial_tf.Emulator: %s=%r has no effect on the CPU emulator and is ignored.",
            what, value,
        )


def build_report(compiled: CompiledStep, gather_threshold_bytes: Optional[int] = None,
                 on_tpu: Optional["TpuCompiledStep"] = None) -> "Report":
    """The ``Report`` of a compiled step (``Emulator.report``, ``CompiledStep.report``):
    the emulator builds it, so the compile part never imports diagnosis."""
    from spatial_tf.emulator.diagnose.report import build_report as diagnose

    return diagnose(compiled, gather_threshold_bytes, on_tpu)


def _checked_target(target, cores):
    """``target`` as a ``TpuTarget`` (None stays None), with libtpu checked now, before
    anything long runs."""
    if target is None:
        return None
    from spatial_tf.emulator.tpu.tpu_compile import check_target

    return check_target("Emulator", target, cores)[0]


class _FunctionKey:
    """Identifies a step function in the cache without keeping it alive.

    Bound methods are made anew at each attribute access, so they are keyed by their
    object and function. A key whose function has been collected equals nothing.
    """

    __slots__ = ("_refs", "_ids", "_strong")

    def __init__(self, fn):
        parts = (fn.__self__, fn.__func__) if hasattr(fn, "__self__") and hasattr(fn, "__func__") else (fn,)
        self._ids = tuple(id(p) for p in parts)
        self._refs: List[Callable[[], Any]] = []
        self._strong: List[Any] = []
        for p in parts:
            try:
                self._refs.append(weakref.ref(p))
            except TypeError:  # not weakly referenceable: kept, the cache is bounded
                self._strong.append(p)
                self._refs.append(functools.partial(_same, p))

    def _alive(self):
        return all(r() is not None for r in self._refs)

    def __hash__(self):
        return hash(self._ids)

    def __eq__(self, other):
        return (isinstance(other, _FunctionKey) and self._ids == other._ids
                and self._alive() and other._alive()
                and all(a() is b() for a, b in zip(self._refs, other._refs)))


def _same(value: Any) -> Any:
    return value


_KERAS_STEPS = {"Trainer.train_step": "Model.train_step, run by Keras' fit",
                "Trainer.test_step": "Model.test_step, run by Keras' evaluate",
                "Trainer.predict_step": "Model.predict_step, run by Keras' predict"}


def _step_name(fn, traced_name):
    """``'train_step'``, or for Keras' own steps which of them it is."""
    python_fn = getattr(fn, "python_function", fn)
    qualname = getattr(python_fn, "__qualname__", "") or ""
    for method, what in _KERAS_STEPS.items():
        if method in qualname or method in traced_name:
            return f"'{traced_name}' ({what})"
    return f"'{traced_name}'"


def _has_sharding(module) -> bool:
    """Whether any instruction of the HLO module carries a sharding annotation."""
    return any(instruction.HasField("sharding")
               for computation in module.computations
               for instruction in computation.instructions)


def _product_hints(dims, product, cores, tensor):
    """Parts of the fix for partition dimensions that do not multiply to ``cores``:
    an example that does, and another emulator that would fit ``dims`` (if any).

    >>> _product_hints([1, 3, 1], 3, 2, tf.ones([2, 6, 4]))
    (', e.g. [1, 2, 1]', '')
    >>> _product_hints([1, 2, 2, 1], 4, 8, tf.ones([1, 4, 8, 1]))
    (', e.g. [1, 8, 1, 1]', ' or an emulator with num_cores_per_replica=4,')
    """
    rank = len(dims) or (tensor.shape.rank or 0)
    example = ""
    if rank:
        split = [i for i, d in enumerate(dims) if d > 1]
        suggested = [1] * rank
        suggested[split[0] if split else min(1, rank - 1)] = cores
        example = f", e.g. {suggested}"
    fits = product in CORE_COUNTS
    other = f" or an emulator with num_cores_per_replica={product}," if fits else ""
    return example, other


def _map_local(strategy, value, fn):
    if isinstance(value, pieces.PerReplica):
        return pieces.PerReplica(tuple(fn(v) for v in value.values))
    return fn(value)


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
        f"MEAN. Fix: pass tf.distribute.ReduceOp.SUM, or the string 'SUM' or 'MEAN'."
    )
