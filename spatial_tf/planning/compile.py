"""Compile one candidate spec of a step on the emulator and read what the planner ranks.

It goes through the emulator's public path, ``emulator.lower(fn, ...).compile()``, as
``run`` and ``report`` do. Only the partitioned program is compiled (``Emulator.report``
also compiles the unpartitioned one). Tracing runs one at a time (TensorFlow and Keras
tracing share state); XLA compiles run in parallel across threads.
"""
import dataclasses
import threading
import time
from typing import Optional

from spatial_tf.emulator.xla import MEMORY_KINDS
from spatial_tf.planning import tpu_memory

__all__ = ["Measured", "compile_candidate"]

_TRACE_LOCK = threading.Lock()


@dataclasses.dataclass
class Measured:
    """What one compile of one spec gave (bytes per core)."""

    cpu: dict                 # argument, output, alias, temp, peak (XLA:CPU; {} with a target)
    tpu: dict                 # the same from the TPU compiler, or TPU-estimated (tpu_memory)
    halo_bytes: int           # collective-permute
    resharding_bytes: int     # all-gather + all-to-all
    resharding_ops: list      # TensorFlow ops whose activation-sized outputs get gathered
    all_reduce_bytes: int     # all-reduce + reduce-scatter
    compile_seconds: float
    tpu_fits: Optional[bool] = None  # the TPU compiler's verdict (None: no target)
    step_time: Optional[float] = None  # predicted TPU seconds per step (fitting, timed)
    step_time_parts: Optional[dict] = None  # its seconds by part (StepTime.parts)
    step_time_missing: Optional[str] = None  # why there is none, with a target
    cached: bool = False  # the TPU compiler's answer came from the compile cache


def compile_candidate(emulator, fn, signature, *, bf16: bool = False,
                      gather_threshold: Optional[int] = None, target=None,
                      timeout: Optional[float] = None, fit_only: bool = False) -> Measured:
    """Lower ``fn`` for ``signature`` (a ``CallSignature``) on ``emulator`` and compile it
    (``emulator.lower(...).compile(target)``): for XLA:CPU with the TPU estimate, or with
    ``target`` by the TPU compiler alone (its figures and verdict; a program that does
    not fit has its ``peak`` from the compiler's message and no communication figures).
    ``timeout``: seconds the TPU compile may take (``TpuCompileTimeout`` after that);
    ``fit_only``: the TPU compile answers the fit and memory only (no step time).
    Raise what tracing or XLA raise."""
    start = time.perf_counter()
    with _TRACE_LOCK:
        lowered = emulator.lower(fn, signature=signature)
    step = lowered.compile(target, timeout=timeout, fit_only=fit_only)
    if target is not None:
        program = step.program
        tpu = dict(program.memory) if program.fits else {
            **dict.fromkeys(MEMORY_KINDS, 0), "peak": program.required_bytes or 0}
        cpu = {}
    else:
        cpu = step.memory()
        tpu = dataclasses.asdict(tpu_memory.estimate(step.hlo_text(), cpu, bf16=bf16))
    found = step.collectives()
    halo = sum(c.bytes for c in found if c.kind == "collective-permute")
    gathers = step.gathers()
    ops = sorted({c.op_name or "(unnamed op)" for c in step.gathers(gather_threshold or 0)})
    reduce = sum(c.bytes for c in found if c.kind in ("all-reduce", "reduce-scatter"))
    measured = Measured(cpu, tpu, halo, sum(c.bytes for c in gathers), ops, reduce,
                        time.perf_counter() - start,
                        step.program.fits if target is not None else None)
    if target is not None:
        measured.cached = step.program.cached
        timed, measured.step_time_missing = _step_time(step)
        if timed is not None:
            measured.step_time, measured.step_time_parts = timed.seconds, dict(timed.parts)
    return measured


def _step_time(step):
    """``(StepTime, None)`` of a TPU-compiled step, or ``(None, why not)``."""
    from spatial_tf.emulator.tpu import NoStepTime

    try:
        return step.step_time(), None
    except NoStepTime as e:
        return None, str(e)
