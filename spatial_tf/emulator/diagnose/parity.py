"""Does partitioning change the results? Compare every output and variable update.

``Emulator.compare(fn, args)`` runs the step partitioned and as a reference (the same
program unpartitioned through XLA, or TensorFlow itself), from the same variable values,
and compares each output and each variable update (new value minus old, so a small
update is not hidden by a large weight). Variables are left as they were.

Errors are normwise: ``max_abs = max|a - b|`` at ``index``,
``max_rel = max_abs / max|b|``; a row matches when ``max_rel <= tolerance`` for its
dtype (``TOLERANCES``). For an update, each element's error is first reduced by one unit
in the last place of the new value (``eps * |new|``). Integer and boolean results must
match exactly.

Float32 results of real models can differ by far more than any fixed tolerance between
two equally valid evaluations (gradients through batch norm over a few values are
ill-conditioned: TensorFlow's own graph and XLA runs differ by percents there). So for
float32 the unpartitioned reference is also computed with float32 replaced by float64,
partitioned and unpartitioned (``xla/precision.py``): a correct partitioning agrees there to
about 1e-12. A float32 row over its tolerance is *rounding* when the float64 programs
agree, an *ERROR* when they do not. ``floor`` shows how far the unpartitioned float32
result itself is from float64, the noise rounding alone makes; where it is large (the
result is ill-conditioned, e.g. a gradient that is zero in exact arithmetic) float64
keeps that amplification, and the float64 agreement required is scaled by it
(``Difference.float64_tolerance``).
"""
import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf

from spatial_tf import context, logs
from spatial_tf.emulator.xla import replicas
from spatial_tf.emulator.xla.errors import CompileError
from spatial_tf.emulator.diagnose.report import display_name
from spatial_tf.emulator.compile.trace import CallSignature, function_name
from spatial_tf.error import Error
from spatial_tf.table import format_table

__all__ = ["compare", "Comparison", "Difference", "ParityError", "TOLERANCES"]

# relative tolerance by dtype name; fp32 partitioned vs unpartitioned differ by summation
# order only (about 1e-7 here); bf16/fp16 keep 8/11 significant bits.
TOLERANCES = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 2e-2}
REFERENCES = ("unpartitioned", "tensorflow")
# float64 programs of a correct partitioning agree far below this (1e-13 measured) on
# results that are not ill-conditioned
FLOAT64_AGREEMENT = 1e-9
# An ill-conditioned result (the float32 floor shows how much rounding is amplified, e.g.
# a gradient that is exactly zero in exact arithmetic, such as a convolution bias followed
# by batch norm) keeps that amplification in float64, scaled by eps64 / eps32; a correct
# partitioning stays within this factor of it (2.5 measured on such biases).
FLOAT64_NOISE_FACTOR = 100.0
_EPS_RATIO = float(np.finfo(np.float64).eps / np.finfo(np.float32).eps)


class ParityError(Error, AssertionError):
    """Raised by ``compare(..., raise_on_mismatch=True)``; ``.comparison`` has the table."""

    def __init__(self, comparison):
        super().__init__(str(comparison))
        self.comparison = comparison


@dataclasses.dataclass(frozen=True)
class Difference:
    """How one output or variable update differs from the reference."""

    path: str
    dtype: str
    shape: tuple
    max_abs: float
    max_rel: float
    index: tuple
    tolerance: float
    ok: bool
    floor: Optional[float] = None  # unpartitioned float32 vs float64 (normwise relative)
    float64_rel: Optional[float] = None  # partitioned vs unpartitioned, both in float64

    @property
    def float64_tolerance(self):
        """How far the float64 programs may differ for this result: ``FLOAT64_AGREEMENT``,
        or more where the float32 floor shows that rounding is amplified."""
        if self.floor is None:
            return None
        return max(FLOAT64_AGREEMENT, FLOAT64_NOISE_FACTOR * self.floor * _EPS_RATIO)

    @property
    def verdict(self):
        """``"match"``, ``"rounding"`` (over tolerance, float64 agrees) or ``"ERROR"``."""
        if self.float64_rel is not None and self.float64_rel > self.float64_tolerance:
            return "ERROR"
        if self.max_rel <= self.tolerance:
            return "match"
        return "rounding" if self.ok else "ERROR"


@dataclasses.dataclass
class Comparison:
    """All differences of one step against its reference; ``ok`` if every row passes."""

    function: str
    reference: str
    rows: list
    note: str = ""

    @property
    def ok(self):
        return all(r.verdict != "ERROR" for r in self.rows)

    @property
    def verdict(self):
        """One line: does the partitioned program compute what the reference does?"""
        errors = sum(r.verdict == "ERROR" for r in self.rows)
        rounding = sum(r.verdict == "rounding" for r in self.rows)
        if errors:
            return (f"ERROR: {errors} of {len(self.rows)} results differ beyond rounding; "
                    f"the partitioned program computes something else")
        if rounding:
            return (f"correct: {len(self.rows) - rounding} of {len(self.rows)} match; "
                    f"{rounding} differ by float32 rounding only (computed in float64, "
                    f"partitioned and unpartitioned agree)")
        return f"correct: all {len(self.rows)} results match"

    @property
    def worst(self):
        """The row with the largest error relative to its tolerance."""
        return max(self.rows, key=lambda r: (not r.ok, r.max_rel / (r.tolerance or 1e-30)),
                   default=None)

    def to_dict(self):
        return {"function": self.function, "reference": self.reference, "ok": self.ok,
                "verdict": self.verdict, "note": self.note,
                "rows": [dict(dataclasses.asdict(r), verdict=r.verdict) for r in self.rows]}

    def __str__(self):
        table = format_table(
            ["result", "dtype", "shape", "max rel err", "at", "tolerance", "fp32 floor",
             "fp64 rel err", "verdict"],
            [
                [r.path, r.dtype, str(r.shape), f"{r.max_rel:.3g}", str(list(r.index)),
                 f"{r.tolerance:g}", "" if r.floor is None else f"{r.floor:.2g}",
                 "" if r.float64_rel is None else f"{r.float64_rel:.2g}", r.verdict]
                for r in self.rows
            ],
            title=f"{self.function}: partitioned vs {self.reference}",
            right=("max rel err", "tolerance", "fp32 floor", "fp64 rel err"),
        )
        note = f"\n{self.note}" if self.note else ""
        return f"{self.verdict}\n{table}{note}"


def difference(path, value, reference, old=None, tolerances=None):
    """A ``Difference`` row; with ``old``, float values are compared as ``value - old``.

    >>> difference("x", np.float32([1, 2.00001]), np.float32([1, 2])).ok
    True
    >>> difference("x", np.float32([1, 2.001]), np.float32([1, 2])).index
    (1,)
    """
    value, reference = np.asarray(value), np.asarray(reference)
    dtype = reference.dtype
    tolerance = _tolerance(dtype, tolerances)
    if value.shape != reference.shape:
        return Difference(path, str(dtype), reference.shape, float("inf"), float("inf"),
                          (), tolerance, False)
    if _is_float(dtype):
        a, b = value.astype(np.float64), reference.astype(np.float64)
        rounding = 0.0
        if old is not None:
            rounding = _eps(dtype) * np.abs(b)
            a, b = a - old.astype(np.float64), b - old.astype(np.float64)
        err = np.maximum(np.abs(a - b) - rounding, 0.0)
        err = np.where(np.isnan(a) & np.isnan(b), 0.0, err)
        err = np.where(np.isnan(err), np.inf, err)
        scale = float(np.nanmax(np.abs(b))) if b.size else 0.0
    else:
        err = (value != reference).astype(np.float64)
        scale = 1.0
    if not err.size:
        return Difference(path, str(dtype), reference.shape, 0.0, 0.0, (), tolerance, True)
    flat = int(np.argmax(err))
    max_abs = float(err.reshape(-1)[flat])
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    index = tuple(int(i) for i in np.unravel_index(flat, err.shape))
    return Difference(path, str(dtype), reference.shape, max_abs, float(max_rel), index,
                      tolerance, bool(max_rel <= tolerance))


def _eps(dtype):
    if np.dtype(dtype).name == "bfloat16":
        return 2.0**-7
    return float(np.finfo(dtype).eps)


def _is_float(dtype):
    return np.issubdtype(dtype, np.floating) or dtype.name == "bfloat16"


def _tolerance(dtype, tolerances):
    table = dict(TOLERANCES, **(tolerances or {}))
    return table.get(np.dtype(dtype).name, 0.0)


def compare(emulator, fn, args=(), kwargs=None, *, reference="unpartitioned",
            tolerances=None, raise_on_mismatch=False):
    """Compare the partitioned step with ``reference`` (``"unpartitioned"`` XLA or
    ``"tensorflow"``); return a ``Comparison`` (see the module docstring).

    ``args`` are one replica's arguments, or per-replica values from the emulator.
    ``tolerances`` overrides ``TOLERANCES`` by dtype name, e.g. ``{"float32": 1e-4}``.
    Steps with random ops (dropout) differ by design: fix their seeds or disable them.

    Raises:
      ParityError: ``raise_on_mismatch`` and some row differs beyond rounding.
    """
    if reference not in REFERENCES:
        raise ValueError(
            f"compare: reference is {reference!r}; expected one of {list(REFERENCES)}. "
            f"Fix: reference='unpartitioned' (XLA on one core) or 'tensorflow'."
        )
    num_replicas = emulator.num_replicas_in_sync
    if reference == "tensorflow" and num_replicas > 1:
        raise ValueError(
            f"compare: reference='tensorflow' runs the step once, as one replica, but the "
            f"emulator runs num_replicas={num_replicas}. Fix: use "
            f"reference='unpartitioned' (the same replicas on one core each), or compare "
            f"on an Emulator with num_replicas=1."
        )
    with logs.quiet():
        result = _compare(emulator, fn, args, kwargs, reference, tolerances)
    if raise_on_mismatch and not result.ok:
        raise ParityError(result)
    return result


def _compare(emulator, fn, args, kwargs, reference, tolerances):
    num_replicas = emulator.num_replicas_in_sync
    calls = replicas.per_replica_calls(args, kwargs, num_replicas,
                                       emulator.experimental_local_results)
    signatures = [CallSignature(a, k) for a, k in calls]
    signatures[0].require_values(function_name(fn), "compare")
    step = emulator.compile(fn, signature=signatures[0])
    traced = step.traced
    values = [[_numpy(t) for t in s.tensors] for s in signatures]
    captures = traced.capture_values()
    outputs, updates = step.program.execute_replicas(values, captures)
    wide = None
    note = ""
    if reference == "unpartitioned":
        ref_outputs, ref_updates = step.unpartitioned.execute_replicas(values, captures)
        label = "unpartitioned XLA"
        if _has_float32(traced):
            wide, note = _float64_runs(step, values, captures)
    else:
        ref_output, ref_update = _run_tensorflow(emulator, fn, signatures[0], traced)
        ref_outputs, ref_updates = [ref_output], [ref_update]
        label = "TensorFlow"
    rows = []
    paths = traced.output_paths()
    names = [traced.captures[c].name.rsplit(":", 1)[0] for _, c in traced.writes]
    for r in range(num_replicas):
        suffix = f" (replica {r})" if num_replicas > 1 else ""
        for i, (path, a, b) in enumerate(zip(paths, outputs[r], ref_outputs[r])):
            row = difference(path + suffix, a, b, tolerances=tolerances)
            rows.append(_with_float64(row, a, b, None, wide and (wide[0][r][i], wide[1][r][i])))
        for i, ((_, c), a, b) in enumerate(zip(traced.writes, updates[r], ref_updates[r])):
            row = difference(f"update of {names[i]}{suffix}", a, b, captures[c], tolerances)
            rows.append(_with_float64(row, a, b, captures[c],
                                      wide and (wide[2][r][i], wide[3][r][i])))
    return Comparison(display_name(traced.name), label, rows, note)


def _numpy(t):
    return t.numpy() if hasattr(t, "numpy") else np.asarray(t)


def _has_float32(traced):
    return any(s.dtype == tf.float32 for s in traced.output_specs) or any(
        traced.captures[c].dtype == tf.float32 for _, c in traced.writes
    )


def _float64_runs(step, values, captures):
    """``(outputs, reference outputs, updates, reference updates)`` of the step computed
    in float64, partitioned and unpartitioned; ``(None, why)`` if XLA cannot."""
    try:
        partitioned = step.float64_program(partitioned=True)
        unpartitioned = step.float64_program(partitioned=False)
        outputs, updates = partitioned.execute_replicas(values, captures)
        ref_outputs, ref_updates = unpartitioned.execute_replicas(values, captures)
    except (CompileError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, (f"note: the step could not be computed in float64 ({first}); float32 "
                      f"rows are judged by their tolerance alone")
    return (outputs, ref_outputs, updates, ref_updates), ""


def _with_float64(row, value, reference, old, wide):
    """``row`` with its float64 agreement and float32 noise floor, for float32 results."""
    if wide is None or np.asarray(reference).dtype != np.float32:
        return row
    wide_value, wide_reference = wide
    exact = difference(row.path, wide_value, wide_reference,
                       None if old is None else np.asarray(old, np.float64))
    floor = difference(row.path, np.asarray(reference, np.float64), wide_reference,
                       None if old is None else np.asarray(old, np.float64))
    row = dataclasses.replace(row, floor=floor.max_rel, float64_rel=exact.max_rel)
    return dataclasses.replace(row, ok=row.ok or exact.max_rel <= row.float64_tolerance)


def _run_tensorflow(emulator, fn, signature, traced):
    """Run ``fn`` as a plain ``tf.function``; return outputs and new variable values.

    Every variable the step reads is restored afterwards, each replica's copy.
    """
    variables = [c for v in traced.variables for c in emulator.replica_copies.of(v) or (v,)]
    saved = [v.numpy() for v in variables]
    python_fn = getattr(fn, "python_function", fn)
    args, kwargs = signature.bind(signature.tensors)
    try:
        with context.logical_device_scope(emulator):
            result = tf.function(python_fn)(*args, **kwargs)
        outputs = [t.numpy() for t in tf.nest.flatten(result) if tf.is_tensor(t)]
        updates = [v.numpy() for v in traced.written_variables]
    finally:
        for v, value in zip(variables, saved):
            v.assign(value)
    return outputs, updates
