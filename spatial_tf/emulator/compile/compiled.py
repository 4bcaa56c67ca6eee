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
that TPU generation instead (``TpuCompiledStep``: the TPU's per-core memory, its HBM
verdict and cost analysis; ``tpu_compile``), with libtpu installed and no TPU needed.
"""
import threading
from typing import List, Optional

from spatial_tf.emulator.compile.executable import Program
from spatial_tf.emulator.diagnose.hlo_text import GATHER_KINDS, Collective, collectives

__all__ = ["Lowered", "CompiledStep", "TpuCompiledStep"]

class Lowered:
    """One replica's step traced for one call signature, not yet compiled.

    Attributes:
      traced: the ``trace.Traced`` program (its ``graph``, ``module``, ``arg_specs``).
      trace_seconds: wall time of tracing.
    """

    def __init__(self, emulator, traced, trace_seconds):
        self.traced = traced
        self.trace_seconds = trace_seconds
        self.num_cores_per_replica = emulator.num_cores_per_replica
        self.num_replicas = emulator.num_replicas
        self.compiler_options = emulator.compiler_options
        self._compiled = None
        self._on_tpu: dict = {}
        self._lock = threading.Lock()

    def hlo_text(self) -> str:
        """The program before partitioning, with the shardings ``split`` added."""
        from spatial_tf.emulator.compile import _xla

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
        from spatial_tf.emulator.compile.tpu_compile import tpu_target

        target = tpu_target(target)
        key = (target.name, fit_only)
        with self._lock:
            if key not in self._on_tpu:
                self._on_tpu[key] = TpuCompiledStep(self, target, timeout, fit_only)
            return self._on_tpu[key]

    @property
    def is_compiled(self) -> bool:
        return self._compiled is not None


class _ProgramText:
    """The partitioned program's text and the collectives read from it, read once."""

    _hlo_text: Optional[str] = None
    _collectives: Optional[List[Collective]] = None

    def _read_hlo_text(self) -> str:
        raise NotImplementedError

    def hlo_text(self) -> str:
        """The partitioned, optimized program as XLA prints it (printed once)."""
        if self._hlo_text is None:
            self._hlo_text = self._read_hlo_text()
        return self._hlo_text

    def collectives(self) -> List[Collective]:
        """Every collective of the partitioned program, in program order, per core, with
        the TensorFlow op it came from (``op_name``); read from the HLO text once."""
        if self._collectives is None:
            self._collectives = collectives(self.hlo_text())
        return list(self._collectives)

    def gathers(self, min_bytes: int = 0) -> List[Collective]:
        """The all-gathers and all-to-alls of at least ``min_bytes`` per core."""
        return [c for c in self.collectives() if c.kind in GATHER_KINDS and c.bytes >= min_bytes]


class CompiledStep(_ProgramText):
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
        same step's ``TpuCompiledStep``, adds that TPU's memory beside XLA:CPU's."""
        from spatial_tf.emulator.diagnose.report import build_report

        return build_report(self, gather_threshold_bytes, on_tpu)

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



class TpuCompiledStep(_ProgramText):
    """A step compiled by XLA's TPU compiler for one replica's cores of a TPU generation.

    Compile-only: its figures are the TPU compiler's (``source``), and it cannot run.

    Attributes:
      traced, trace_seconds: as ``Lowered``'s.
      target: the ``TpuTarget``.
      program: the partitioned program's ``TpuProgram`` (``fits``, ``memory``,
        ``verdict()``, ``cost``, ``compile_seconds``, ``cached``).
    """

    def __init__(self, lowered, target, timeout=None, fit_only=False):
        self.lowered = lowered
        self.traced = lowered.traced
        self.trace_seconds = lowered.trace_seconds
        self.target = target
        self._timeout = timeout
        self.fit_only = fit_only
        self.program = self._compile(lowered.num_cores_per_replica)
        self._unpartitioned = None

    def _compile(self, num_partitions):
        from spatial_tf.emulator.compile import _xla, replicas
        from spatial_tf.emulator.compile.tpu_compile import Propagation, Waiting, compile_for_tpu

        traced = self.traced
        num_replicas = self.lowered.num_replicas  # every replica's program, as on the pod
        hlo = replicas.prepare(traced.hlo, num_replicas)
        first_capture = len(traced.arg_specs)
        propagation = Propagation(*_xla.propagation(
            hlo, num_replicas, range(first_capture, first_capture + len(traced.captures)),
            [r for r, _ in traced.writes]))
        return compile_for_tpu(hlo, num_partitions, self.target, name=traced.name,
                               num_replicas=num_replicas, propagation=propagation,
                               waiting=Waiting(self._timeout), fit_only=self.fit_only)

    @property
    def fits(self) -> bool:
        """The TPU compiler accepted the partitioned step within one core's HBM."""
        return self.program.fits

    @property
    def source(self) -> str:
        return self.program.source

    @property
    def compile_seconds(self) -> float:
        return self.program.compile_seconds

    def memory(self, partitioned: bool = True) -> Optional[dict]:
        """The TPU compiler's bytes per core by kind and ``peak`` (``partitioned=False``:
        the step on one core); None when that program does not fit."""
        return (self.program if partitioned else self.unpartitioned).memory

    def verdict(self, partitioned: bool = True) -> str:
        return (self.program if partitioned else self.unpartitioned).verdict()

    def cost_analysis(self) -> dict:
        """The TPU compiler's cost analysis of the partitioned step (per core)."""
        return dict(self.program.cost)

    def step_time(self, partitioned: bool = True):
        """The predicted seconds of one step on the TPU (``step_time.StepTime``: the
        compiler's estimated cycles at the generation's clock, plus the collectives
        priced over its inter-chip links); ``partitioned=False``: the step on one core.

        Raises:
          step_time.NoStepTime: the program does not fit (the compiler produced none),
            or the generation's clock or links are not published.
        """
        from spatial_tf.emulator.compile.step_time import NoStepTime, step_time

        program = self.program if partitioned else self.unpartitioned
        if program.fit_only:
            raise NoStepTime(
                f"{self.traced.name}: no step time on TPU {self.target.name}: compiled for "
                f"the fit only (fit_only=True: XLA's lowest memory-fitting effort, whose "
                f"program may be scheduled and rematerialized unlike the default's). Fix: "
                f"compile without fit_only for the step time.")
        if not program.fits:
            raise NoStepTime(
                f"{self.traced.name}: no step time on TPU {self.target.name}: the TPU "
                f"compiler did not fit the step in one core's HBM "
                f"({program.verdict()}), so there is no program to time. Fix: more "
                f"cores per replica, or a smaller batch or volume.")
        return step_time(program.hlo_text, self.target.generation,
                         num_cores=program.num_partitions, libtpu=program.libtpu)

    @property
    def unpartitioned(self):
        """The same step compiled by the TPU compiler for one core (a ``TpuProgram``)."""
        if self._unpartitioned is None:
            self._unpartitioned = self._compile(1)
        return self._unpartitioned

    def _read_hlo_text(self) -> str:
        if not self.program.fits:
            return ""  # the compiler stopped at buffer assignment: no program to read
        return self.program.hlo_text
