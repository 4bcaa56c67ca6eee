"""What a partitioned step costs per core: memory, communication, and where it reshards.

``Emulator.report(fn, args)`` compiles the step partitioned and unpartitioned and
returns a ``Report``: per-core argument / output / temp bytes of both (so the saving is
one division away), every collective in the partitioned program by kind with count and
bytes, and a warning naming the TensorFlow op wherever an activation-sized tensor is
gathered (all-gather / all-to-all), or where frames taken one at a time from a split
axis are sent to every core (Keras' ``TimeDistributed``): the places where the split
does not survive.

``str(report)`` is a table; ``report.to_dict()`` gives the same figures to programs.
"""
import collections
import dataclasses
from typing import Any, Dict, List, Optional

from spatial_tf import logs
from spatial_tf.emulator.diagnose import cpu_only, folds, op_source, remedies
from spatial_tf.emulator.xla.executable import MEMORY_KINDS
from spatial_tf.emulator.xla.hlo_text import GATHER_KINDS, KINDS, dims
from spatial_tf.table import format_bytes, format_table

__all__ = ["Report", "build_report", "display_name", "GATHER_KINDS"]



@dataclasses.dataclass
class Report:
    """Figures for one step function on one emulator layout (bytes are per core).

    Attributes:
      function: the step's name.
      num_replicas, num_cores_per_replica: the layout.
      partitioned, unpartitioned: bytes by kind (``argument``, ``output``, ``alias``
        i.e. outputs written in place of arguments, ``temp``) and ``peak`` (argument +
        output - alias + temp), per core / on the one device.
      compile_seconds: ``{"partitioned": s, "unpartitioned": s}``.
      collectives: every collective instruction (``hlo_text.Collective``), in program
        order; counts are instructions in the program (a loop body counts once).
      warnings: one line per TensorFlow op whose output gets gathered, and per line of
        the user's code whose ops take frames one at a time from a split axis (sent to
        every core: Keras' ``TimeDistributed`` on a clip split in time).
      gather_threshold_bytes: the size from which a gathered tensor is activation-sized.
      tpu: with a TPU target, what XLA's TPU compiler says of the same step (``target``,
        ``device_kind``, ``source``, ``partitioned`` / ``unpartitioned`` bytes by kind or
        None where it does not fit, ``fits``, ``verdict``, ``compile_seconds``,
        ``step_time``: ``StepTime`` or None for each, ``step_time_missing``: why none);
        else None.
      notes: memory XLA:CPU spends that XLA's TPU compiler does not (``cpu_only``).
    """

    function: str
    num_replicas: int
    num_cores_per_replica: int
    partitioned: dict
    unpartitioned: dict
    compile_seconds: dict
    collectives: list
    warnings: list
    gather_threshold_bytes: int
    tpu: Optional[dict] = None
    notes: list = dataclasses.field(default_factory=list)

    def by_kind(self):
        """``{kind: {"count": n, "bytes": total, "largest": bytes}}`` over collectives."""
        out: Dict[str, Any] = {}
        for c in self.collectives:
            row = out.setdefault(c.kind, {"count": 0, "bytes": 0, "largest": 0})
            row["count"] += 1
            row["bytes"] += c.bytes
            row["largest"] = max(row["largest"], c.bytes)
        return out

    def ratio(self, kind="peak"):
        """Partitioned per-core bytes / unpartitioned bytes for ``kind`` (e.g. ``temp``)."""
        base = self.unpartitioned[kind]
        return self.partitioned[kind] / base if base else float("nan")

    def to_dict(self):
        d = dataclasses.asdict(self)
        d["by_kind"] = self.by_kind()
        return d

    def __str__(self):
        cores = self.num_replicas * self.num_cores_per_replica
        layout = (
            f"{self.num_cores_per_replica} cores"
            if self.num_replicas == 1
            else f"{self.num_replicas} replicas x {self.num_cores_per_replica} cores"
        )
        headers = ["bytes", "per core", "unpartitioned", "ratio"]
        rows = [[k, format_bytes(self.partitioned[k]), format_bytes(self.unpartitioned[k]),
                 _ratio(self.partitioned[k], self.unpartitioned[k])]
                for k in MEMORY_KINDS + ("peak",)]
        title = (f"{self.function} on {layout} ({cores} virtual CPU devices); "
                 f"compile {self.compile_seconds['partitioned']:.1f} s partitioned, "
                 f"{self.compile_seconds['unpartitioned']:.1f} s unpartitioned")
        if self.tpu:
            name = f"TPU {self.tpu['target']}"
            headers += [f"{name} per core", f"{name} unpartitioned", f"{name} ratio"]
            for row, k in zip(rows, MEMORY_KINDS + ("peak",)):
                row += _tpu_cells(self.tpu, k)
            title += f"; first columns XLA:CPU, {name} columns {self.tpu['source']}"
            title += _cached_text(self.tpu.get("cached", {}))
        memory = format_table(headers, rows, title=title,
                              right=[h for h in headers if h != "bytes"])
        if self.tpu:
            memory += "\n" + "\n".join(
                f"{name} {which}: {self.tpu['verdict'][which]}"
                for which in ("partitioned", "unpartitioned"))
            memory += "\n" + _step_time_lines(self.tpu)
        kinds = self.by_kind()
        comm = format_table(
            ["collective", "count", "bytes per core", "largest", "what it is"],
            [
                [k, kinds[k]["count"], format_bytes(kinds[k]["bytes"]),
                 format_bytes(kinds[k]["largest"]), KINDS[k]]
                for k in KINDS if k in kinds
            ] or [["(none)", 0, "", "", "no communication: every core works alone"]],
            right=("bytes per core", "largest"),
        )
        parts = [memory, "", comm]
        if self.warnings:
            parts += ["", "warnings:"] + [f"  - {w}" for w in self.warnings]
        if self.notes:
            parts += ["", "notes:"] + [f"  - {n}" for n in self.notes]
        return "\n".join(parts)


def _ratio(a, b):
    return f"{a / b:.2f}" if b else "-"


def _tpu_cells(tpu, kind):
    """The TPU columns of one memory row: bytes, or "does not fit" where the compiler
    refused that program for the device's HBM."""
    cells = []
    for which in ("partitioned", "unpartitioned"):
        memory = tpu[which]
        if memory is None:
            cells.append("does not fit" if kind == "peak" else "-")
        else:
            cells.append(format_bytes(memory[kind]))
    both = tpu["partitioned"] and tpu["unpartitioned"]
    cells.append(_ratio(tpu["partitioned"][kind], tpu["unpartitioned"][kind]) if both else "-")
    return cells


def _step_time_lines(tpu):
    """The predicted TPU step times, partitioned and not, their ratio and their source;
    or why there is none."""
    from spatial_tf.emulator.tpu.step_time import seconds_text

    times = tpu.get("step_time") or {}
    name = f"TPU {tpu['target']}"
    shown = {which: t for which, t in times.items() if t is not None}
    if not shown:
        return f"{name} step time: none ({tpu.get('step_time_missing')})"
    first = next(iter(shown.values()))
    head = f"{name} step time, predicted from {first.source}: " + ", ".join(
        f"{which} {seconds_text(t.seconds)}" for which, t in shown.items())
    if len(shown) == 2:
        head += (f"; speed-up of the split "
                 f"{shown['unpartitioned'].seconds / shown['partitioned'].seconds:.2f}x")
    lines = [head] + [f"  {which}: {t.breakdown()}" + (
        f"; not counted: {'; '.join(t.left_out)}" if t.left_out else "")
        for which, t in shown.items()]
    if len(shown) < 2:
        lines.append(f"  {tpu.get('step_time_missing')}")
    return "\n".join(lines)


def _tpu_step_times(on_tpu):
    """``{partitioned|unpartitioned: StepTime or None}`` and why one is missing."""
    from spatial_tf.emulator.tpu.step_time import NoStepTime

    times, missing = {}, []
    for which, partitioned in (("partitioned", True), ("unpartitioned", False)):
        try:
            times[which] = on_tpu.step_time(partitioned)
        except NoStepTime as e:
            times[which] = None
            missing.append(f"{which}: {e}")
    return times, "; ".join(missing) or None


def _cached_text(cached):
    """What of the TPU columns was read from the compile cache.

    >>> _cached_text({"partitioned": True, "unpartitioned": True})
    ', both read from the compile cache'
    >>> _cached_text({"partitioned": False, "unpartitioned": True})
    ', unpartitioned read from the compile cache'
    >>> _cached_text({"partitioned": False, "unpartitioned": False})
    ''
    """
    found = [which for which in ("partitioned", "unpartitioned") if cached.get(which)]
    if not found:
        return ""
    return f", {'both' if len(found) == 2 else found[0]} read from the compile cache"


def _tpu_figures(on_tpu):
    """``Report.tpu`` from a ``TpuCompiledStep``."""
    programs = {"partitioned": on_tpu.program, "unpartitioned": on_tpu.unpartitioned}
    times, missing = _tpu_step_times(on_tpu)
    return {
        "step_time": times, "step_time_missing": missing,
        "target": on_tpu.target.name,
        "device_kind": on_tpu.program.device_kind,
        "source": on_tpu.source,
        **{which: p.memory for which, p in programs.items()},
        "fits": {which: p.fits for which, p in programs.items()},
        "verdict": {which: p.verdict() for which, p in programs.items()},
        "compile_seconds": {which: p.compile_seconds for which, p in programs.items()},
        "cached": {which: p.cached for which, p in programs.items()},
    }


def display_name(name):
    """The name a user gave a step: ``run.<locals>.step_fn`` -> ``step_fn``.

    >>> display_name("run.<locals>.step_fn"), display_name("Trainer.train_step")
    ('step_fn', 'Trainer.train_step')
    """
    return name.rsplit("<locals>.", 1)[-1]


def build_report(step, gather_threshold_bytes=None, on_tpu=None):
    """A ``Report`` for a ``CompiledStep`` (see ``Emulator.report``), with the TPU
    compiler's figures of ``on_tpu`` (the same step's ``TpuCompiledStep``) if given."""
    with logs.quiet():
        report = _build_report(step, gather_threshold_bytes)
    if on_tpu is not None:
        report.tpu = _tpu_figures(on_tpu)
    return report


def _build_report(step, gather_threshold_bytes):
    program = step.program
    found = step.collectives()
    if gather_threshold_bytes is None:
        gather_threshold_bytes = _activation_threshold(step.traced, program.compiled)
    return Report(
        function=display_name(step.traced.name),
        num_replicas=program.num_replicas,
        num_cores_per_replica=program.num_partitions,
        partitioned=step.memory(),
        unpartitioned=step.memory(partitioned=False),
        compile_seconds={
            "partitioned": program.compile_seconds,
            "unpartitioned": step.unpartitioned.compile_seconds,
        },
        collectives=found,
        warnings=_gather_warnings(found, gather_threshold_bytes, step.traced,
                                  program.num_partitions),
        gather_threshold_bytes=gather_threshold_bytes,
        notes=cpu_only.notes(step.hlo_text(), _variable_shapes(step.traced)),
    )


def _variable_shapes(traced):
    return [v.shape.as_list() for v in traced.variables if v.shape.rank is not None]


def _activation_threshold(traced, compiled):
    """An eighth of the smallest per-core piece of a split tensor argument, among those
    at least 1/64 of the largest piece.

    Weights are replicated in spatial partitioning, so what gets gathered is derived
    from the split activations; an eighth (one 2x downsampling of a volume) keeps
    tensors from deeper, smaller levels in while leaving out scalars and small vectors.
    Split arguments far smaller than the largest (a batch's class ids or box targets,
    which XLA may split too) do not lower it. With no split argument, nothing counts as
    activation-sized.
    """
    pieces = [
        spec.shape.num_elements() * spec.dtype.size // count
        for spec, count in zip(traced.arg_specs, compiled.parameter_pieces())
        if count > 1
    ]
    if not pieces:
        return None
    return max(min(p for p in pieces if p >= max(pieces) // 64) // 8, 1)


def _gather_warnings(found, threshold, traced, num_cores):
    if threshold is None:
        return []
    graph = traced.graph
    variables = _variable_shapes(traced)
    grouped: "collections.OrderedDict[Any, List[Any]]" = collections.OrderedDict()
    for c in found:
        if c.kind in GATHER_KINDS and c.bytes >= threshold:
            grouped.setdefault((c.op_name or "(unnamed op)", c.kind), []).append(c)
    warnings = []
    for (op_name, kind), items in grouped.items():
        source = op_source.find(graph, op_name)
        total = sum(c.bytes for c in items)
        shapes = ", ".join(sorted({c.shape for c in items}))
        warnings.append(
            f"{kind} of an activation-sized tensor at TensorFlow op '{op_name}'"
            f"{_origin(source)} ({len(items)}x, {format_bytes(total)} per core; {shapes}): "
            + remedies.explain(kind, source, num_cores, op_name, dims(items[0].shape),
                               variables, items[0].dimensions) + _saving(total, num_cores)
        )
    return warnings + _frame_warnings(found, threshold, graph, num_cores)


def _origin(source):
    """``", made at file.py:12 in f: `line`"``, or "" without the user's line."""
    if source is None or source.frame is None:
        return ""
    made = "the gradient of the op made at" if source.gradient else "made at"
    return f", {made} {source.where()}"


def _saving(total, num_cores):
    return (f" Kept split, it would need up to {format_bytes(total - total // num_cores)} "
            f"less per core." if num_cores > 1 else "")


def _frame_warnings(found, threshold, graph, num_cores):
    """One warning per line of the user's code whose ops take frames one at a time from
    a split axis (``x[:, i]``, Keras' ``TimeDistributed``): XLA sends each frame to every
    core (all-reduces, collective-permutes) rather than gathering the tensor."""
    sources: Dict[str, Any] = {}
    grouped: "collections.OrderedDict[Any, List[Any]]" = collections.OrderedDict()
    for c in found:
        if (c.kind not in folds.FRAME_KINDS or c.bytes < threshold or not c.op_name
                or c.op_name.startswith(op_source.GRADIENT_PREFIX)):
            continue
        if c.op_name not in sources:
            source = op_source.find(graph, c.op_name)
            taken = source is not None and folds.takes_frame(source.op) is not None
            sources[c.op_name] = source if taken else None
        if sources[c.op_name] is not None:
            grouped.setdefault(sources[c.op_name].where() or c.op_name, []).append(c)
    warnings = []
    for items in grouped.values():
        names = sorted({c.op_name for c in items})
        source = sources[names[0]]
        kinds = " and ".join(k for k in folds.FRAME_KINDS if any(c.kind == k for c in items))
        more = f" and {len(names) - 1} more like it" if len(names) > 1 else ""
        total = sum(c.bytes for c in items)
        largest = max(sum(c.bytes for c in items if c.kind == k) for k in folds.FRAME_KINDS)
        shapes = ", ".join(sorted({c.shape for c in items}))
        warnings.append(
            f"{kinds} of activation-sized frames at TensorFlow op '{names[0]}'{more}"
            f"{_origin(source)} ({len(items)}x, {format_bytes(total)} per core; {shapes}): "
            + remedies.explain(items[0].kind, source, num_cores) + _saving(largest, num_cores))
    return warnings
