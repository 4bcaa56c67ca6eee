"""A step lowered and compiled without running it: ``emulator.lower(fn, args).compile()``.

As with jax's ``jit(f).lower(*args).compile()``: ``Emulator.lower`` traces one replica's
step for the given arguments into an XLA program (``Lowered``: its ``hlo_text`` before
partitioning); ``compile()`` partitions and compiles it for the emulator's cores
(``CompiledStep``: memory per core, collectives by kind with the TensorFlow op behind
each, the partitioned HLO text, ``report()``). ``run``, ``report``, ``compare`` and the
planner all go through these two, so there is one memory formula (``Program.memory``),
one list of gather kinds (``hlo_text.GATHER_KINDS``), and a step compiled once is not
compiled again (``Emulator.compiled_steps``).

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
"""
import threading
from typing import List, Optional

from spatial_tf.emulator.executable import Program
from spatial_tf.emulator.hlo_text import GATHER_KINDS, Collective, collectives

__all__ = ["Lowered", "CompiledStep"]

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
        self._lock = threading.Lock()

    def hlo_text(self) -> str:
        """The program before partitioning, with the shardings ``split`` added."""
        from spatial_tf.emulator import _xla

        return _xla.hlo_module_text(self.traced.hlo)

    def compile(self) -> "CompiledStep":
        """Partition and compile for the emulator's cores (once; later calls return it)."""
        with self._lock:
            if self._compiled is None:
                self._compiled = CompiledStep(self)
            return self._compiled

    @property
    def is_compiled(self) -> bool:
        return self._compiled is not None


class CompiledStep:
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
        self._hlo_text: Optional[str] = None
        self._collectives: Optional[List[Collective]] = None

    @property
    def compile_seconds(self) -> float:
        return self.program.compile_seconds

    def memory(self, partitioned: bool = True) -> dict:
        """Bytes per core (``partitioned=False``: on the one device of the unpartitioned
        program) by kind, and ``peak``; see ``Program.memory``."""
        return (self.program if partitioned else self.unpartitioned).memory()

    def hlo_text(self) -> str:
        """The partitioned, optimized program as XLA prints it (printed once)."""
        if self._hlo_text is None:
            self._hlo_text = self.program.compiled.hlo_text()
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

    def report(self, gather_threshold_bytes: Optional[int] = None):
        """The ``Report`` of this step (what ``Emulator.report`` returns)."""
        from spatial_tf.emulator.report import build_report

        return build_report(self, gather_threshold_bytes)

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

