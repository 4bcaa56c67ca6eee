"""``plan()``: which spec, on how many cores, fits the per-core budget and runs fastest.

Every candidate spec (``candidates.py``) is compiled on the emulator by XLA's SPMD
partitioner, or with a TPU target by XLA's TPU compiler; per candidate the plan reads
per-core memory (XLA:CPU's figure and a TPU estimate, ``tpu_memory.py``, or the TPU
compiler's), the predicted TPU step time (with a target: ``TpuCompiledStep.step_time``),
halo bytes (collective-permute), resharding bytes (all-gather / all-to-all, with the
TensorFlow ops gathered) and all-reduce bytes, then ranks: fits the budget, then the
shortest predicted step, then least halo + resharding bytes, then least all-reduce bytes,
then least memory. Sizes too large to compile here are predicted from a few smaller
compiles (``fit_sizes``, ``fit.py``).

>>> import tensorflow as tf, spatial_tf
>>> w = tf.Variable(tf.ones([3, 3, 3, 1, 2]))
>>> def step(x):
...     return tf.reduce_sum(tf.nn.conv3d(x, w, [1] * 5, "SAME"))
>>> p = spatial_tf.plan(step, (2, 16, 16, 16, 1), 2, budget="64MiB",
...                     options=PlanOptions(progress=False))
>>> [(c.spec, c.halo_bytes > 0, c.fits) for c in p.candidates]
[((2, 1, 1, 1, 1), False, True), ((1, 2, 1, 1, 1), True, True)]
>>> print(p.why)  # doctest: +ELLIPSIS
Recommended [2,1,1,1,1]: fits 64MiB (... TPU-estimated peak per core, within 64.0 MiB); ...
"""
import dataclasses
import math
import time
from typing import Any, Optional, Sequence

import tensorflow as tf

from spatial_tf.planning import candidates as candidates_lib
from spatial_tf.planning.budgets import Budget, parse_budget
from spatial_tf.planning.compile import compile_candidate
from spatial_tf.planning.compile_all import NotCompiled, compile_all, compiles_text
from spatial_tf.steps import make_gradient_step, run_model, segmentation_losses
from spatial_tf.planning.fit import LinearFit, largest_edge
from spatial_tf.planning.inputs import input_specs, leaf_spec, resized, volume_of
from spatial_tf.planning.options import PlanOptions, Training, check_memory, from_keywords
from spatial_tf.emulator.xla import MEMORY_KINDS
from spatial_tf.emulator.tpu import SOURCE as STEP_TIME_SOURCE, seconds_text
from spatial_tf.table import format_bytes, format_table, plural

__all__ = ["plan", "Plan", "Candidate", "PlanOptions", "Training"]

@dataclasses.dataclass
class Candidate:
    """One spec of the volume input, compiled (or predicted from a fit) on N cores.

    Attributes:
      spec: split counts of the volume input (the other inputs follow it).
      num_cores: cores per replica.
      ok: it compiled; else ``reason`` says why not.
      cpu, tpu: per-core bytes (``argument``, ``output``, ``alias``, ``temp``, ``peak``):
        XLA:CPU's, and the TPU's: the TPU compiler's with a target (``cpu`` is then
        empty), else the tile-padding estimate (``tpu_memory``).
      tpu_fits: the TPU compiler's verdict (None without a target).
      halo_bytes, resharding_bytes, all_reduce_bytes: per core per step.
      resharding_ops: TensorFlow ops whose activation-sized outputs XLA gathers.
      fits: peak within the budget (on the plan's memory basis); None without budget.
      predicted: the figures come from ``fit`` rather than a compile at this size.
      fit: ``{"cpu": LinearFit, "tpu": LinearFit, "sizes": [...], "check": {...}}``.
      step_time: predicted seconds per step on the TPU (the TPU compiler's cost model,
        ``TpuCompiledStep.step_time``); None without a target, for a program that does
        not fit, or a generation whose clock is not published (``step_time_missing``);
        ``step_time_parts``: its seconds by part (``StepTime.parts``).
      cached: the TPU compiler's answer was read from the compile cache.
    """

    spec: tuple
    num_cores: int
    ok: bool = True
    reason: Optional[str] = None
    cpu: dict = dataclasses.field(default_factory=dict, repr=False)
    tpu: dict = dataclasses.field(default_factory=dict, repr=False)
    halo_bytes: int = 0
    resharding_bytes: int = 0
    resharding_ops: list = dataclasses.field(default_factory=list)
    all_reduce_bytes: int = 0
    compile_seconds: float = 0.0
    fits: Optional[bool] = None
    predicted: bool = False
    fit: Optional[dict] = dataclasses.field(default=None, repr=False)
    tpu_fits: Optional[bool] = None
    step_time: Optional[float] = None
    step_time_parts: Optional[dict] = dataclasses.field(default=None, repr=False)
    step_time_missing: Optional[str] = dataclasses.field(default=None, repr=False)
    cached: bool = False

    @property
    def communication_bytes(self) -> int:
        """Halo + resharding bytes per core: what the spec itself costs to move."""
        return self.halo_bytes + self.resharding_bytes

    def peak(self, basis: str = "tpu") -> int:
        return (self.tpu if basis == "tpu" else self.cpu).get("peak", 0)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["spec"] = list(self.spec)
        d["communication_bytes"] = self.communication_bytes
        if self.fit:
            d["fit"] = _plain(self.fit)
        return d


def _plain(x):
    if isinstance(x, LinearFit):
        return {"a": x.a, "b": x.b, "points": [list(p) for p in x.points]}
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


@dataclasses.dataclass
class Plan:
    """The ranked candidates for one step, input shape and core count; see ``plan``."""

    function: str
    shape: tuple
    num_cores: int
    budget: Optional[Budget]
    memory: str
    bf16: bool
    candidates: list
    recommended: Optional[Candidate]
    why: str
    seconds: float
    fit_sizes: Optional[Sequence[int]] = None
    tpu_source: Optional[str] = None  # the TPU compiler that measured it (None: estimate)

    @property
    def unfinished(self) -> list:
        """Candidates a time limit or Ctrl-C left uncompiled (``reason`` says which)."""
        return [c for c in self.candidates
                if not c.ok and str(c.reason).startswith("not compiled: ")]

    def to_dict(self) -> dict:
        return {
            "function": self.function, "shape": list(self.shape), "num_cores": self.num_cores,
            "tpu_source": self.tpu_source,
            "budget": dataclasses.asdict(self.budget) if self.budget else None,
            "memory": self.memory, "bf16": self.bf16, "fit_sizes": self.fit_sizes,
            "candidates": [c.to_dict() for c in self.candidates],
            "recommended": list(self.recommended.spec) if self.recommended else None,
            "why": self.why, "seconds": self.seconds,
        }

    def with_budget(self, budget: Any, *, memory: Optional[str] = None,
                    reserve: Optional[float] = None) -> "Plan":
        """The same compiles ranked against another ``budget`` (and memory basis)."""
        memory = check_memory(memory or self.memory)
        budget = parse_budget(budget, reserve) if budget is not None else None
        found, recommended, why = _rank(self.candidates, budget, memory, self.tpu_source)
        return dataclasses.replace(self, budget=budget, memory=memory, candidates=found,
                                   recommended=recommended, why=why)

    def at(self, shape: Sequence[int]) -> "Plan":
        """The same fitted candidates predicted and ranked at another volume ``shape``
        (needs a plan made with ``fit_sizes``)."""
        if self.fit_sizes is None:
            raise ValueError(
                f"Plan.at: this plan compiled {list(self.shape)} directly (fit_sizes=None); "
                f"expected a fitted plan to predict other sizes. Fix: plan(..., "
                f"options=PlanOptions(fit_sizes=(16, 24, 32)))."
            )
        shape = candidates_lib.check_shape(shape, "Plan.at")
        if len(shape) != len(self.shape):
            raise ValueError(
                f"Plan.at: shape {list(shape)} has rank {len(shape)}; expected rank "
                f"{len(self.shape)} like {list(self.shape)}. Fix: keep the batch and "
                f"channel axes."
            )
        voxels = math.prod(shape[1:-1])
        moved = [_predict(c, voxels) if c.ok else c for c in self.candidates]
        found, recommended, why = _rank(moved, self.budget, self.memory, self.tpu_source)
        return dataclasses.replace(self, shape=tuple(shape), candidates=found,
                                   recommended=recommended, why=why)

    def largest_edge(self, multiple: int = 1):
        """``(edge, candidate)``: the largest cube edge (a multiple of ``multiple``) any
        fitted candidate holds within the budget, on the plan's memory basis.

        Needs a plan made with ``fit_sizes`` and a ``budget``.
        """
        if self.budget is None or self.fit_sizes is None:
            raise ValueError(
                f"Plan.largest_edge: this plan has budget={self.budget} and fit_sizes="
                f"{self.fit_sizes}; expected both. Fix: plan(..., budget='v3', "
                f"options=PlanOptions(fit_sizes=(16, 24, 32)))."
            )
        best = (0, None)
        for c in self.candidates:
            if c.ok and c.fit:
                edge = largest_edge(c.fit[self.memory], self.budget.usable, multiple)
                if edge > best[0]:
                    best = (edge, c)
        return best

    def __str__(self):
        tpu_header = "peak TPU" if self.tpu_source else "peak TPU est."
        rows = []
        for rank, c in enumerate(self.candidates, 1):
            if not c.ok:
                rows.append([rank, _spec(c.spec), "error", "", "", "", "", "", "",
                             _short(c.reason)])
                continue
            note = ""
            if c.resharding_ops:
                note = "gathers at " + ", ".join(c.resharding_ops[:2]) + (
                    f" (+{len(c.resharding_ops) - 2})" if len(c.resharding_ops) > 2 else "")
            if c.fit and c.fit.get("check"):
                check = c.fit["check"]
                note = (note + "; " if note else "") + (
                    f"fit error {check['error']:+.1%} at {check['edge']}^3")
            rows.append([
                rank, _spec(c.spec),
                "-" if c.fits is None else ("yes" if c.fits else "no"),
                format_bytes(c.cpu["peak"]) if c.cpu else "-", _tpu_peak(c),
                format_bytes(c.halo_bytes), format_bytes(c.resharding_bytes),
                format_bytes(c.all_reduce_bytes),
                "fit" if c.predicted else ("cached" if c.cached
                                           else f"{c.compile_seconds:.1f}"), note,
            ])
            if self.tpu_source:
                rows[-1].insert(5, "-" if c.step_time is None else seconds_text(c.step_time))
        if self.tpu_source and self.budget is not None and self.budget.device is not None:
            # the compiler's own HBM limit decides, not the planning reserve
            budget = (f", budget {self.budget.name}: what its TPU compiler fits in one "
                      f"{self.budget.device.split(' (')[0]}")
        else:
            budget = f", budget {self.budget}" if self.budget else ", no budget"
        title = (f"{self.function}: {'x'.join(map(str, self.shape))} on "
                 f"{plural(self.num_cores, 'core')}, per core{budget}")
        headers = ["rank", "spec", "fits", "peak CPU", tpu_header, "halo", "resharding",
                   "all-reduce", "compile s", "note"]
        if self.tpu_source:
            headers.insert(5, "step est.")
        rows = [r if len(r) == len(headers) else r[:5] + [""] + r[5:] for r in rows]
        table = format_table(
            headers, rows, title=title,
            right=("peak CPU", tpu_header, "step est.", "halo", "resharding", "all-reduce",
                   "compile s"),
        )
        return "\n".join([table, "", self.why] + self._notes())

    def _notes(self):
        """The lines under the table: where each column comes from, what was predicted,
        what was not compiled, how long planning took."""
        lines = []
        if self.tpu_source:
            lines.append(
                f"Fits and peak TPU: {self.tpu_source}, at the real size; '>' marks a program "
                f"the compiler refused as out of memory, with the size it said it needs. "
                f"Peak CPU: not compiled (the TPU compiler's figures decide).")
            lines.append(_step_time_note(self.candidates))
        else:
            basis = "TPU est." if self.memory == "tpu" else "CPU"
            lines.append(
                f"Ranked on {basis} peak bytes. TPU est. = XLA:CPU's figures with TPU tile "
                f"padding applied (spatial_tf.planning.tpu_memory), an estimate that "
                f"overstates TPU memory several-fold"
                + (", activations counted as bfloat16" if self.bf16 else "")
                + f". For the TPU compiler's own figures: {_TPU_HINT}.")
        if self.fit_sizes:
            lines.append(f"Figures marked 'fit' are predicted from compiles at "
                         f"{', '.join(f'{e}^3' for e in self.fit_sizes)} "
                         f"(bytes = a + b * voxels per core).")
        if self.unfinished:
            lines.append(
                f"Not compiled: {', '.join(_spec(c.spec) for c in self.unfinished)} "
                f"({self.unfinished[0].reason[len('not compiled: '):]}); the ranking and "
                f"the recommendation cover the candidates compiled.")
        lines.append(f"Planned in {self.seconds:.1f} s{_compiles(self.candidates)}.")
        return lines


def _compiles(candidates):
    """``: 3 compiles, 1 from cache, the others 96-121 s each`` (predicted figures and
    candidates never compiled are not compiles).

    >>> c = lambda seconds, cached=False: Candidate((1,), 1, compile_seconds=seconds,
    ...                                             cached=cached)
    >>> _compiles([c(96.0), c(121.4), c(2.0, cached=True)])
    ': 3 compiles, 1 from cache, the others 96-121 s each'
    >>> _compiles([c(40.2)]), _compiles([c(1.0, True)]), _compiles([])
    (': 1 compile, 40 s', ': 1 compile, from cache', '')
    """
    done = [c for c in candidates if not c.predicted and not str(c.reason or "").startswith(
        "not compiled: ")]
    if not done:
        return ""
    fresh = sorted(c.compile_seconds for c in done if not c.cached)
    text = ": " + compiles_text(done)
    if fresh:
        low, high = round(fresh[0]), round(fresh[-1])
        span = f"{low} s" if low == high else f"{low}-{high} s"
        text += (", the others " if len(fresh) < len(done) else ", ") + span + (" each" if len(fresh) > 1
                                                              else "")
    return text


def _spec(spec):
    return "[" + ",".join(map(str, spec)) + "]"


def _step_time_note(candidates):
    """Where the ``step est.`` column comes from, or why it is empty."""
    missing = next((c.step_time_missing for c in candidates
                    if c.ok and c.tpu_fits and c.step_time is None), None)
    if missing:
        return f"Step est.: none: {missing}"
    return (f"Step est.: seconds per step predicted from {STEP_TIME_SOURCE}; the input "
            f"pipeline and host work are not counted.")


_TPU_HINT = ("pip install 'spatial-tf[tpu-compile]' and a TPU generation as the budget or "
             "PlanOptions(target=...)")


def _tpu_peak(c):
    text = format_bytes(c.tpu["peak"])
    return f"> {text}" if c.tpu_fits is False else text


def _short(text, limit=70):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------ steps


def _model_step(model, loss, optimizer):
    import keras

    if loss is None and optimizer is None and getattr(model, "optimizer", None) is not None:
        # compiled: Keras' own train step, with the compiled loss, metrics and optimizer
        model.optimizer.build(model.trainable_variables)

        def fit_step(image, labels):
            return model.train_step((image, labels))

        return fit_step
    optimizer = keras.optimizers.get(optimizer if optimizer is not None else "adam")
    optimizer.build(model.trainable_variables)
    if loss is None:   # the segmentation step spatial_tf.train runs
        from spatial_tf.losses import segmentation_loss

        step = make_gradient_step(model, optimizer, segmentation_losses(model, segmentation_loss))
    else:
        loss = keras.losses.get(loss) if isinstance(loss, str) else loss
        step = make_gradient_step(model, optimizer, lambda batch: {
            "loss": loss(batch[1], run_model(model, batch[0], None, training=True))})

    def train_step(image, labels):
        return step((image, labels))["loss"]

    return train_step


def _is_model(x):
    try:
        import keras
    except ImportError:  # pragma: no cover - keras ships with TensorFlow
        return False
    return isinstance(x, keras.Model)


def _check_model_rank(model, volume):
    shape = getattr(model, "input_shape", None)
    if isinstance(shape, tuple) and shape and all(isinstance(d, (int, type(None))) for d in shape):
        if len(shape) != len(volume.shape):
            raise ValueError(
                f"plan: the input shape {list(volume.shape)} has rank {len(volume.shape)} "
                f"but the model takes rank {len(shape)} inputs {list(shape)}. Expected "
                f"(batch, *spatial, channels) of the model's rank. Fix: e.g. "
                f"{[1] + [d or 64 for d in shape[1:]]}."
            )


# ------------------------------------------------------------------ plan


def plan(step_or_model: Any, inputs: Any, num_cores_per_replica: int, budget: Any = None, *,
         specs: Optional[Sequence[Sequence[int]]] = None,
         options: Optional[PlanOptions] = None, training: Optional[Training] = None,
         **deprecated: Any) -> Plan:
    """Compile every candidate spec and rank them; see the module docstring.

    Args:
      step_or_model: a step function called with the inputs, already split (do not split
        them inside), or a Keras model, trained as ``training`` says (a model compiled
        with ``model.compile`` is planned as ``fit`` trains it).
      inputs: shapes (tuples of ints), ``tf.TensorSpec`` s or tensors, one or a tuple /
        dict of them; the first of rank >= 3 is the volume whose spec is chosen. A model
        given one input gets sparse int32 labels of the volume's shape without channels.
        Nothing of these sizes is allocated.
      num_cores_per_replica: 1, 2, 4, ..., 128.
      budget: bytes per core, a size (``"16GiB"``) or a TPU slice (``"v3"``), see
        ``budgets.parse_budget``.
      specs: the candidate specs of the volume (default: ``candidate_specs``).
      options: how candidates are measured and ranked (``PlanOptions``: memory basis,
        bf16, a size fit, threads, progress, reserve).
      training: how a Keras model is trained (``Training``: loss, optimizer, model_fn).
      deprecated: the keyword arguments of earlier releases (``memory=``, ``fit_sizes=``,
        ``loss=``, ...), folded into ``options`` / ``training`` with a warning.

    Raises:
      ValueError: bad arguments, or no candidate compiled (the first reason).
      TimeoutError: ``options.timeout`` ended before any candidate compiled.
      KeyboardInterrupt: Ctrl-C before any candidate compiled (after, the plan ranks
        those compiled and lists the rest in ``Plan.unfinished``).
    """
    start = time.perf_counter()
    from spatial_tf.spec import check_num_cores_per_replica

    options, training = from_keywords(options, training, deprecated)
    num_cores = check_num_cores_per_replica(num_cores_per_replica)
    budget = parse_budget(budget, options.reserve) if budget is not None else None
    is_model, tree, volume = _checked_inputs(step_or_model, inputs, options, training)
    shape = tuple(int(d) for d in volume.shape)
    if specs is None:
        specs = candidates_lib.candidate_specs(shape, num_cores, symmetric=options.symmetric)
    specs = [_check_spec(s, shape, num_cores) for s in specs]
    target = _target(options, budget)
    sizes = [None] if options.fit_sizes is None else \
        list(options.fit_sizes) + ([options.fit_check] if options.fit_check else [])
    steps = _steps_by_size(step_or_model, is_model, training, tree, volume, sizes)
    name = "train_step" if is_model else getattr(step_or_model, "__name__", "step")
    results = _measure(steps, name, tree, volume, specs, sizes, num_cores, options, target)
    found = [_candidate(spec, num_cores, {e: results[(spec, e)] for e in sizes},
                        options.fit_sizes, options.fit_check, shape) for spec in specs]
    source = None
    if target is not None:
        from spatial_tf.emulator.tpu import compiler_name

        source = compiler_name(target)
    if not any(c.ok for c in found):
        raise _none_compiled(found, name, num_cores, shape, options.timeout)
    found, recommended, why = _rank(found, budget, options.memory, source)
    return Plan(name, shape, num_cores, budget, options.memory, bool(options.bf16), found,
                recommended, why, time.perf_counter() - start, options.fit_sizes, source)


def _none_compiled(found, name, num_cores, shape, timeout):
    """The error when no candidate compiled: the time limit's, or the first reason."""
    reasons = sorted({c.reason for c in found})
    if all(r.startswith("not compiled: the time limit") for r in reasons):
        return TimeoutError(
            f"plan: the time limit of {timeout:g} s ended before any candidate of {name} on "
            f"{plural(num_cores, 'core')} compiled. Fix: a larger timeout (a program that fits "
            f"takes the TPU compiler minutes on a 2-core machine).")
    return ValueError(
        f"plan: no candidate of {name} compiled on {plural(num_cores, 'core')} for "
        f"{list(shape)}: {_short(reasons[0], 300)}. Expected a step XLA compiles (static "
        f"shapes, ops with XLA kernels). Fix: run it once with spatial_tf.Emulator("
        f"{num_cores}).run(...) to see the full error, and change the op it names."
    )


def _checked_inputs(step_or_model, inputs, options, training):
    """Whether ``step_or_model`` is a Keras model, the input specs and the volume's spec,
    checked against the model (its input rank, what ``fit`` needs)."""
    is_model = _check_step_or_model(step_or_model)
    tree = input_specs(inputs, is_model)
    volume = volume_of(tree)
    if is_model:
        _check_model_rank(step_or_model, volume)
        _check_fit_model(step_or_model, options, training)
    return is_model, tree, volume


def _target(options, budget):
    """The ``TpuTarget`` whose compiler measures the candidates, or None (see
    ``PlanOptions.target``)."""
    from spatial_tf.emulator.tpu import TpuTarget, check_compiler, libtpu_version, tpu_target

    if options.memory != "tpu" or options.target is None:
        return None
    if options.target != "auto":
        target = tpu_target(options.target)
        check_compiler("plan", target)
        return target
    if budget is None or budget.generation is None or options.fit_sizes is not None:
        return None
    if libtpu_version() is None:
        return None
    return TpuTarget(budget.generation, budget.slice.suffix if budget.slice else None)


def _check_step_or_model(step_or_model):
    """True for a Keras model, False for a step function, else a ``TypeError``."""
    if _is_model(step_or_model):
        return True
    if not callable(step_or_model):
        raise TypeError(
            f"plan: step_or_model is {type(step_or_model).__name__}; expected a step "
            f"function or a Keras model. Fix: pass the function you give Emulator.run, or "
            f"the model."
        )
    return False


def _check_fit_model(model, options, training):
    if options.fit_sizes is not None and training.model_fn is None and any(
            d is not None for d in model.input_shape[1:-1]):
        raise ValueError(
            f"plan: fit_sizes needs the model at edges {options.fit_sizes}, but the model "
            f"takes only {list(model.input_shape)}. Expected model_fn(input_shape) -> "
            f"model to rebuild it. Fix: e.g. training=Training(model_fn=lambda s: "
            f"unet3d(s, ...))."
        )


def _steps_by_size(step_or_model, is_model, training, tree, volume, sizes):
    """``{edge: step}``: the step to compile at each cube edge (None: the inputs' size)."""
    if not is_model:
        return {edge: step_or_model for edge in sizes}
    steps = {}
    for edge in sizes:
        model = step_or_model
        if edge is not None and training.model_fn is not None:
            model = training.model_fn(tuple(resized(tree, volume, edge)[0].shape[1:]))
        steps[edge] = _model_step(model, training.loss, training.optimizer)
    return steps


def _measure(steps, name, tree, volume, specs, sizes, num_cores, options, target=None):
    """``{(spec, edge): Measured or the exception}``: every candidate compiled."""
    from spatial_tf.emulator import Emulator
    from spatial_tf.emulator.compile import CallSignature

    emulator = Emulator(num_cores_per_replica=num_cores)

    def run(job, seconds_left):
        spec, edge = job
        shapes = tree if edge is None else resized(tree, volume, edge)
        vol = volume_of(shapes)
        spec_tree = tf.nest.map_structure(lambda s: leaf_spec(s, vol, spec, num_cores), shapes)
        inner = steps[edge]

        def planned_step(*args):
            from spatial_tf.annotate import split

            return inner(*split(tuple(args), spec_tree))

        planned_step.__name__ = planned_step.__qualname__ = name
        signature = CallSignature(shapes, None)
        piece = vol.shape.num_elements() * vol.dtype.size // num_cores
        return compile_candidate(emulator, planned_step, signature, bf16=options.bf16,
                                 gather_threshold=max(piece // 8, 1), target=target,
                                 timeout=seconds_left, fit_only=options.fit_only)

    jobs = [(s, e) for s in specs for e in sizes]
    return compile_all(jobs, run, workers=options.workers, progress=options.progress,
                       description=f"planning {name} on {num_cores} cores",
                       timeout=options.timeout, row=_row_line)


def _row_line(job, result):
    """One line for a candidate whose compile ended (shown as it ends)."""
    spec, edge = job
    where = _spec(spec) + (f" at {edge}^3" if edge is not None else "")
    if isinstance(result, Exception):
        return f"  {where}: {_short(str(result).strip() or type(result).__name__, 90)}"
    verdict = {True: "fits", False: "does not fit", None: "compiled"}[result.tpu_fits]
    peak = result.tpu.get("peak") if result.tpu else result.cpu.get("peak")
    timed = f", step est. {seconds_text(result.step_time)}" if result.step_time else ""
    took = "cached" if result.cached else f"{result.compile_seconds:.1f} s"
    return f"  {where}: {verdict}, peak {format_bytes(peak or 0)} per core{timed} ({took})"


def _rank(found, budget, memory, tpu_source=None):
    """Copies of the candidates, with ``fits`` set, in rank order; the recommendation.

    With the TPU compiler's verdicts (``tpu_fits``), a candidate fits when the compiler
    accepted it and, for a budget given as a size, its peak is within it."""
    found = [dataclasses.replace(c) for c in found]
    for c in found:
        if c.ok and memory == "tpu" and c.tpu_fits is not None:
            c.fits = c.tpu_fits and (budget is None or budget.device is not None
                                     or c.peak(memory) <= budget.usable)
            continue
        c.fits = c.peak(memory) <= budget.usable if (c.ok and budget is not None) else None
    found.sort(key=lambda c: (not c.ok, c.fits is False,
                              c.step_time if c.step_time is not None else math.inf,
                              c.communication_bytes, c.all_reduce_bytes,
                              c.peak(memory) if c.ok else 0))
    recommended, why = _recommend(found, budget, memory, tpu_source)
    return found, recommended, why


def _check_spec(spec, shape, num_cores):
    try:
        spec = tuple(int(c) for c in spec)
    except (TypeError, ValueError):
        spec = None
    if spec is None or len(spec) != len(shape):
        raise ValueError(
            f"plan: spec {spec!r} does not match the input of rank {len(shape)} "
            f"{list(shape)}; expected {len(shape)} split counts. Fix: e.g. "
            f"{[1] * (len(shape) - 1) + [1]} with the counts of the axes to split."
        )
    if math.prod(spec) != num_cores or any(s % c for s, c in zip(shape, spec)):
        raise ValueError(
            f"plan: spec {list(spec)} does not split {list(shape)} over {num_cores} cores; "
            f"expected counts whose product is {num_cores}, each dividing its axis. Fix: "
            f"leave specs=None to try every valid one."
        )
    return spec


def _candidate(spec, num_cores, by_edge, fit_sizes, fit_check, shape):
    errors = [r for r in by_edge.values() if isinstance(r, Exception)]
    if errors:
        e = errors[0]
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        reason = first if isinstance(e, NotCompiled) else f"{type(e).__name__}: {first}"
        return Candidate(spec, num_cores, ok=False, reason=reason)
    if fit_sizes is None:
        m = by_edge[None]
        return Candidate(spec, num_cores, cpu=m.cpu, tpu=m.tpu, halo_bytes=m.halo_bytes,
                         resharding_bytes=m.resharding_bytes, resharding_ops=m.resharding_ops,
                         all_reduce_bytes=m.all_reduce_bytes, compile_seconds=m.compile_seconds,
                         tpu_fits=m.tpu_fits, step_time=m.step_time,
                         step_time_parts=m.step_time_parts,
                         step_time_missing=m.step_time_missing, cached=m.cached)
    return _fitted(spec, num_cores, by_edge, fit_sizes, fit_check, shape)


_PARTS = MEMORY_KINDS + ("peak",)


def _fitted(spec, num_cores, by_edge, fit_sizes, fit_check, shape):
    rank = len(shape) - 2
    edges = list(fit_sizes)
    vox = [e**rank for e in edges]
    fits = {"sizes": edges}
    for basis in ("cpu", "tpu"):
        fits[f"{basis}_parts"] = {
            key: LinearFit.from_points(vox, [getattr(by_edge[e], basis)[key] for e in edges])
            for key in _PARTS}
        fits[basis] = fits[f"{basis}_parts"]["peak"]
    # halo moves faces: it grows with voxels^(2/3); resharding with voxels
    fits["halo"] = LinearFit.from_points([v ** (2 / 3) for v in vox],
                                         [by_edge[e].halo_bytes for e in edges])
    fits["resharding"] = LinearFit.from_points(vox, [by_edge[e].resharding_bytes for e in edges])
    if fit_check:
        m = by_edge[fit_check]
        v = fit_check**rank
        fits["check"] = {"edge": fit_check, "error": fits["cpu"].error(v, m.cpu["peak"]),
                         "tpu_error": fits["tpu"].error(v, m.tpu["peak"]),
                         "measured": m.cpu["peak"], "measured_tpu": m.tpu["peak"]}
    largest = by_edge[max(edges)]
    template = Candidate(spec, num_cores, resharding_ops=largest.resharding_ops,
                         all_reduce_bytes=largest.all_reduce_bytes,
                         compile_seconds=sum(m.compile_seconds for m in by_edge.values()),
                         predicted=True, fit=fits)
    return _predict(template, math.prod(shape[1:-1]))


def _predict(c, voxels):
    """A copy of fitted candidate ``c`` with its figures predicted at ``voxels``."""
    fits = c.fit
    return dataclasses.replace(
        c,
        cpu={k: round(f.predict(voxels)) for k, f in fits["cpu_parts"].items()},
        tpu={k: round(f.predict(voxels)) for k, f in fits["tpu_parts"].items()},
        halo_bytes=max(round(fits["halo"].predict(voxels ** (2 / 3))), 0),
        resharding_bytes=max(round(fits["resharding"].predict(voxels)), 0),
    )


def _recommend(found, budget, memory, tpu_source=None):
    ok = [c for c in found if c.ok]
    basis = "XLA:CPU" if memory == "cpu" else ("TPU compiler's" if tpu_source else "TPU-estimated")
    best = ok[0]
    if tpu_source and not best.fits:
        smallest = min(ok, key=lambda c: c.peak(memory))
        return None, (
            f"No candidate fits: {tpu_source} refused every one as out of memory; the "
            f"smallest needs {format_bytes(smallest.peak(memory))} per core "
            f"({_spec(smallest.spec)}). Use more cores, a smaller volume or bf16 "
            f"activations.")
    if budget is not None and not best.fits:
        smallest = min(ok, key=lambda c: c.peak(memory))
        return None, (
            f"No candidate fits {budget}: the smallest {basis} peak is "
            f"{format_bytes(smallest.peak(memory))} per core ({_spec(smallest.spec)}). "
            f"Use more cores, a smaller volume or bf16 activations.")
    why = f"Recommended {_spec(best.spec)}: "
    if budget is not None:
        if tpu_source:
            why += (f"fits {budget.name} (the TPU compiler accepted it; peak "
                    f"{format_bytes(best.peak(memory))} per core); ")
        else:
            why += (f"fits {budget.name} ({format_bytes(best.peak(memory))} {basis} peak per "
                    f"core, within {budget.limit}); ")
    others = [c for c in ok if c is not best and (budget is None or c.fits)]
    if best.step_time is not None:
        why += f"the shortest predicted TPU step ({seconds_text(best.step_time)})"
        if others and others[0].step_time is not None:
            why += f", against {seconds_text(others[0].step_time)} for {_spec(others[0].spec)}"
        why += f"; it moves {format_bytes(best.communication_bytes)} of halo + resharding per core"
    else:
        why += (f"it moves the least halo + resharding bytes per core "
                f"({format_bytes(best.communication_bytes)})")
        if others:
            why += (f", against {format_bytes(others[0].communication_bytes)} for "
                    f"{_spec(others[0].spec)}")
    if best.resharding_ops:
        why += f"; XLA still gathers at {', '.join(best.resharding_ops[:3])}"
    return best, why + "."
