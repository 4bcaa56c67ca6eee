"""A step compiled by XLA's TPU compiler: ``emulator.lower(fn, args).compile(target="v5e")``.

``Lowered.compile(target)`` (``spatial_tf.emulator.compile.compiled``) hands the traced
program to this module: ``TpuCompiledStep`` compiles it with XLA's TPU compiler for one
replica's cores of that TPU generation (``tpu_compile``, libtpu installed, no TPU
needed) and answers as a ``CompiledStep`` does (``memory()``, ``collectives()``,
``hlo_text()``), with the TPU's HBM verdict, its cost analysis and the predicted step
time (``step_time``). Compile-only: it gives figures, it cannot run.
"""
from typing import Optional

from spatial_tf.emulator.xla.hlo_text import ProgramText

__all__ = ["TpuCompiledStep"]


class TpuCompiledStep(ProgramText):
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
        from spatial_tf.emulator.xla import _xla, replicas
        from spatial_tf.emulator.tpu.tpu_compile import Propagation, Waiting, compile_for_tpu

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
        from spatial_tf.emulator.tpu.step_time import NoStepTime, step_time

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
