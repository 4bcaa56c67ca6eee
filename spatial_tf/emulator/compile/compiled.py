"""A step lowered and compiled without running it: ``emulator.lower(fn, args).compile()``.

As with jax's ``jit(f).lower(*args).compile()``: ``Emulator.lower`` traces one replica's
step for the given arguments into an XLA program (``Lowered``: its ``hlo_text`` before
partitioning); ``compile()`` partitions and compiles it for the emulator's cores
(``CompiledStep``: memory per core, collectives by kind with the TensorFlow op behind
each, the partitioned HLO text, ``report()``). ``run``, ``report``, ``compare`` and the
planner all go through these two, so there is one memory formula
(``executable.with_peak``), one list of gather kinds (``hlo_text.GATHER_KINDS``), and a
step compiled once is not compiled again (``Emulator.compiled_steps``).

>>> import tensorflow as tf
>>> import spatial_tf
>>> emulator = spatial_tf.Emulator(num_cores_per_replica=2)
>>> def step(x):
...     x = spatial_tf.split(x, [1, 2])
...     return tf.reduce_sum(tf.nn.relu(x))
>>> lowered = emulator.lower(step, (tf.ones([4, 64]),))
>>> "sharding={devices=[1,2]" in lowered.hlo_text()
True
>>> compiled = lowered.compile()
>>> compiled.memory()["argument"]                # each core holds half of the 4 x 64 floats
512
>>> [c.kind for c in compiled.collectives()]     # the sum's halves are added up
['all-reduce']
>>> compiled is emulator.compile(step, (tf.ones([4, 64]),))
True

``compile(target="v5e")`` compiles the same traced program with XLA's TPU compiler for
that TPU generation instead (``TpuCompiledStep``, ``spatial_tf.emulator.tpu``: the TPU's
per-core memory, its HBM verdict and cost analysis), with libtpu installed and no TPU
needed. A compiled step's ``report()`` is built by the emulator that lowered it
(``Emulator.report``; diagnosis sits above this module and is not imported here).
"""
import threading
from typing import Any, Callable, Optional

from spatial_tf.emulator.tpu.compiled_step import TpuCompiledStep
from spatial_tf.emulator.xla.executable import Program
from spatial_tf.emulator.xla.hlo_text import ProgramText

__all__ = ["Lowered", "CompiledStep", "TpuCompiledStep"]


class Lowered:
    """One replica's step traced for one call signature, not yet compiled.

    Attributes:
      traced: the ``trace.Traced`` program (its ``graph``, ``module``, ``arg_specs``).
      trace_seconds: wall time of tracing.
      build_report: the emulator's ``build_report(compiled, gather_threshold_bytes,
        on_tpu)``, which ``CompiledStep.report`` calls.
    """

    def __init__(self, emulator, traced, trace_seconds,
                 build_report: Callable[..., Any]):
        self.traced = traced
        self.trace_seconds = trace_seconds
        self.build_report = build_report
        self.num_cores_per_replica = emulator.num_cores_per_replica
        self.num_replicas = emulator.num_replicas
        self.compiler_options = emulator.compiler_options
        self._compiled: Optional["CompiledStep"] = None
        self._on_tpu: dict = {}
        self._lock = threading.Lock()

    def hlo_text(self) -> str:
        """The program before partitioning, with the shardings ``split`` added."""
        from spatial_tf.emulator.xla import _xla

        return _xla.hlo_module_text(self.traced.hlo)

    def compile(self, target=None, *, timeout: Optional[float] = None,
                fit_only: bool = False):
        """Partition and compile for the emulator's cores (once; later calls return it).

        With ``target`` (a TPU generation or slice: ``"v3"``, ``"v5e"``, ``"v4-8"``),
        compile it with XLA's TPU compiler for that TPU instead and return a
        ``TpuCompiledStep`` (compile-only: it gives figures, it cannot run); ``timeout``
        stops a TPU compile after that many seconds; ``fit_only`` compiles it for the fit
        and memory only, at XLA's lowest memory-fitting effort (no ``step_time``). See
        ``tpu_compile``.
        """
        if target is not None:
            return self._compile_for_tpu(target, timeout, bool(fit_only))
        with self._lock:
            if self._compiled is None:
                self._compiled = CompiledStep(self)
            return self._compiled

    def _compile_for_tpu(self, target, timeout, fit_only):
        from spatial_tf.emulator.tpu.tpu_compile import tpu_target

        target = tpu_target(target)
        key = (target.name, fit_only)
        with self._lock:
            if key not in self._on_tpu:
                self._on_tpu[key] = TpuCompiledStep(self, target, timeout, fit_only)
            return self._on_tpu[key]

    @property
    def is_compiled(self) -> bool:
        return self._compiled is not None


class CompiledStep(ProgramText):
    """A step compiled for ``num_replicas`` x ``num_cores_per_replica`` virtual devices.

    Attributes:
      traced, trace_seconds: as ``Lowered``'s.
      program: the partitioned ``Program`` (``compile_seconds``; ``run`` executes it).
    """

    def __init__(self, lowered):
        self.lowered = lowered
        self.traced = lowered.traced
        self.trace_seconds = lowered.trace_seconds
        self.program = Program(
            self.traced, lowered.num_cores_per_replica, num_replicas=lowered.num_replicas,
            compiler_options=lowered.compiler_options,
        )
        self._unpartitioned = None
        self._float64 = {}

    @property
    def compile_seconds(self) -> float:
        return self.program.compile_seconds

    def memory(self, partitioned: bool = True) -> dict:
        """Bytes per core (``partitioned=False``: on the one device of the unpartitioned
        program) by kind, and ``peak``; see ``Program.memory``."""
        return (self.program if partitioned else self.unpartitioned).memory()

    def _read_hlo_text(self) -> str:
        return self.program.compiled.hlo_text()

    def report(self, gather_threshold_bytes: Optional[int] = None, on_tpu=None):
        """The ``Report`` of this step (what ``Emulator.report`` returns); ``on_tpu``, the
        same step's ``TpuCompiledStep``, adds that TPU's memory beside XLA:CPU's. The
        emulator that lowered the step builds it (``Lowered.build_report``)."""
        return self.lowered.build_report(self, gather_threshold_bytes, on_tpu)

    @property
    def unpartitioned(self) -> Program:
        """The same step compiled with one core per replica (no spatial partitioning)."""
        if self._unpartitioned is None:
            self._unpartitioned = Program(
                self.traced, 1, num_replicas=self.lowered.num_replicas,
                compiler_options=self.lowered.compiler_options,
            )
        return self._unpartitioned

    def float64_program(self, partitioned: bool) -> Program:
        """The step with float32 computed in float64, partitioned or on one core."""
        if partitioned not in self._float64:
            self._float64[partitioned] = Program(
                self.traced, self.program.num_partitions if partitioned else 1,
                num_replicas=self.lowered.num_replicas,
                compiler_options=self.lowered.compiler_options, float64=True,
            )
        return self._float64[partitioned]
