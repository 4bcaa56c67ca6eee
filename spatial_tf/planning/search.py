"""The fewest cores, and the largest cube, that the TPU compiler fits: searched by compiles.

With libtpu installed, the TPU compiler's out-of-memory verdict is the fit test. It comes
back in seconds, while a program that fits takes seconds to many minutes to compile on a
CPU machine, so both searches spend as few fitting compiles as they can:

- ``search_fewest_cores`` tries core counts upward (1, 2, 4, ...) and, at each, the
  candidate specs in the planner's order, stopping at the first that fits: every count
  below the answer costs only out-of-memory verdicts, and the answer itself one fitting
  compile. The answer is the one a loop compiling every spec at every count gives.
- ``search_largest_edge`` comes down from the largest edge allowed: each out-of-memory
  verdict says how many bytes that size needs, so the next edge tried is where a line
  through those sizes (bytes = a + b * voxels) meets the device's memory, and the search
  ends when an edge fits and the next multiple does not. Most answers take one or two
  fitting compiles; it assumes memory grows with the volume, as bisection does.

Each probe is a ``plan`` of one spec with ``PlanOptions(target=..., fit_only=True)``, so
its figures and verdict are the planner's, compiled at XLA's lowest memory-fitting effort
(the same memory and verdicts on every program measured, sooner; no step time), and
cached like any other compile.
"""
import dataclasses
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from spatial_tf.checks import CORE_COUNTS
from spatial_tf.planning.budgets import parse_budget
from spatial_tf.planning.candidates import candidate_specs, check_shape
from spatial_tf.planning.options import PlanOptions, Training
from spatial_tf.table import plural

__all__ = ["Probe", "Search", "search_fewest_cores", "search_largest_edge", "edge_search"]



@dataclasses.dataclass(frozen=True)
class Probe:
    """One compile of the search: the cores and shape tried, the spec, the verdict."""

    num_cores: int
    shape: tuple
    spec: tuple
    fits: bool
    peak: int
    seconds: float
    cached: bool = False  # the TPU compiler's answer was read from the compile cache


@dataclasses.dataclass
class Search:
    """What a search found: ``answer`` (cores or edge; None if nothing fits),
    ``plan`` (the ``Plan`` of the answer's fitting spec), every ``Probe`` in order, and
    where the figures come from (``source``)."""

    question: str
    answer: Optional[int]
    plan: Any
    probes: List[Probe]
    source: str
    seconds: float

    def __str__(self):
        from spatial_tf.table import format_bytes, format_table

        rows = [[p.num_cores, "x".join(map(str, p.shape)), "[" + ",".join(map(str, p.spec)) + "]",
                 "yes" if p.fits else "no", ("" if p.fits else "> ") + format_bytes(p.peak),
                 "cached" if p.cached else f"{p.seconds:.1f}"] for p in self.probes]
        table = format_table(["cores", "shape", "spec", "fits", "peak per core", "s"], rows,
                             title=f"{self.question}: {self.source}",
                             right=("peak per core", "s"))
        found = "none fits" if self.answer is None else str(self.answer)
        return f"{table}\nAnswer: {found} ({_compiles(self.probes)}, {self.seconds:.0f} s)."


def _compiles(probes):
    """``3 compiles``, ``1 compile, from cache``, ``2 compiles, 1 from cache``.

    >>> _compiles([Probe(1, (1,), (1,), True, 0, 1.0, cached=True)])
    '1 compile, from cache'
    """
    from spatial_tf.planning.compile_all import compiles_text

    return compiles_text(probes)


def _probe(step_or_model, shape, cores, budget, spec, options, training):
    from spatial_tf.planning.plan import plan

    start = time.perf_counter()
    model = step_or_model
    if training.model_fn is not None:
        model = training.model_fn(tuple(shape[1:]))
    result = plan(model, tuple(shape), cores, budget, specs=[spec], options=options,
                  training=training)
    candidate = result.candidates[0]
    if not candidate.ok:
        raise ValueError(f"search: {list(shape)} on {plural(cores, 'core')} with {list(spec)} "
                         f"did not compile: {candidate.reason}. Fix: run that step once with "
                         f"spatial_tf.Emulator({cores}).run(...) to see the full error.")
    probe = Probe(cores, tuple(shape), tuple(spec), bool(candidate.fits),
                  candidate.peak("tpu"), time.perf_counter() - start, candidate.cached)
    return probe, result


def _options(options, budget):
    from spatial_tf.emulator.tpu import check_compiler, tpu_target

    options = options or PlanOptions(progress=False)
    target = options.target
    if target in (None, "auto"):
        if budget is None:
            raise ValueError(
                "search: no TPU to compile for; expected a budget naming a TPU generation "
                "or PlanOptions(target=...). Fix: budget='v3'.")
        target = budget
    checked = tpu_target(target)
    check_compiler("search", checked)
    return dataclasses.replace(options, target=checked.name, fit_sizes=None, memory="tpu",
                               fit_only=True)


def search_fewest_cores(step_or_model: Any, shape: Sequence[int], budget: Any, *,
                        core_counts: Sequence[int] = CORE_COUNTS,
                        options: Optional[PlanOptions] = None,
                        training: Optional[Training] = None) -> Search:
    """The fewest cores per replica on which the TPU compiler fits ``shape``.

    ``budget``: a TPU generation (``"v3"``) whose compiler decides, or any budget with
    ``options.target``. Counts whose specs cannot split ``shape`` are skipped.

    >>> import tensorflow as tf
    >>> w = tf.Variable(tf.ones([3, 3, 1, 4]))
    >>> step = lambda x: tf.reduce_sum(tf.nn.conv2d(x, w, 1, "SAME"))
    >>> found = search_fewest_cores(step, (1, 128, 128, 1), "v5e", core_counts=(1, 2))
    >>> found.answer, [p.fits for p in found.probes]
    (1, [True])
    """
    start = time.perf_counter()
    shape = check_shape(shape, "search_fewest_cores")
    options = _options(options, budget)
    training = training or Training()
    probes: List[Probe] = []
    for cores in sorted(core_counts):
        try:
            specs = candidate_specs(shape, cores, symmetric=options.symmetric)
        except ValueError:
            continue  # no spec of this count splits the shape
        for spec in specs:
            probe, result = _probe(step_or_model, shape, cores, budget, spec, options, training)
            probes.append(probe)
            if probe.fits:
                return Search(f"fewest cores for {list(shape)}", cores, result, probes,
                              result.tpu_source, time.perf_counter() - start)
    return Search(f"fewest cores for {list(shape)}", None, None, probes,
                  _source(options), time.perf_counter() - start)


def search_largest_edge(step_or_model: Any, shape: Sequence[int], num_cores: int,
                        budget: Any, *, spec: Optional[Sequence[int]] = None,
                        edges: Optional[range] = None, options: Optional[PlanOptions] = None,
                        training: Optional[Training] = None, **deprecated: Any) -> Search:
    """The largest cube edge among ``edges`` whose volume ``shape`` (its batch and
    channels kept, every spatial axis that edge) the TPU compiler fits on ``num_cores``
    cores with ``spec`` (default: the planner's first candidate at each size). ``edges``
    is a ``range`` of multiples of its step, e.g. ``range(64, 1025, 64)``; by default
    every edge up to 16 times the given one. A Keras model of fixed input size needs
    ``training.model_fn``. (``multiple=``/``high=`` of earlier releases still work, with
    a ``DeprecationWarning``: ``edges=range(multiple, high + 1, multiple)``.)
    """
    start = time.perf_counter()
    shape = check_shape(shape, "search_largest_edge")
    multiple, high = _edge_range(edges, deprecated)
    options = _options(options, budget)
    training = training or Training()
    rank = len(shape) - 2
    probes: List[Probe] = []
    best = None

    def at(edge):
        nonlocal best
        sized = (shape[0],) + (edge,) * rank + (shape[-1],)
        chosen = tuple(spec) if spec is not None else candidate_specs(sized, num_cores)[0]
        probe, result = _probe(step_or_model, sized, num_cores, budget, chosen, options,
                               training)
        probes.append(probe)
        if probe.fits and (best is None or edge > best[0]):
            best = (edge, result)
        return probe.fits, probe.peak

    top = max(multiple, (high or 16 * max(shape[1:-1])) // multiple * multiple)
    available = parse_budget(budget).device_bytes if budget is not None else None
    low = edge_search(at, multiple, top, available, rank)
    if low is None:
        return Search(f"largest cube on {plural(num_cores, 'core')}", None, None, probes,
                      _source(options), time.perf_counter() - start)
    plan = best[1] if best is not None else None  # low fits, so best is set
    return Search(f"largest cube on {plural(num_cores, 'core')}", low, plan, probes,
                  plan.tpu_source if plan is not None else _source(options),
                  time.perf_counter() - start)


def _edge_range(edges, deprecated):
    """``(multiple, high)`` from ``edges`` (a range) or the earlier keywords."""
    unknown = sorted(set(deprecated) - {"multiple", "high"})
    if unknown:
        raise TypeError(f"search_largest_edge: unexpected keyword argument {unknown[0]!r}; "
                        f"expected spec, edges, options or training. Fix: remove it.")
    if deprecated:
        multiple, high = deprecated.get("multiple", 1), deprecated.get("high")
        warnings.warn(f"search_largest_edge(..., {', '.join(f'{k}=' for k in deprecated)}) is "
                      f"deprecated; pass edges=range({multiple}, {high} + 1, {multiple}).",
                      DeprecationWarning, stacklevel=3)
        return multiple, high
    if edges is None:
        return 1, None
    if not isinstance(edges, range) or edges.step < 1 or not len(edges) \
            or edges.start % edges.step:
        raise ValueError(f"search_largest_edge: edges is {edges!r}; expected a non-empty "
                         f"range of multiples of its step. Fix: e.g. edges=range(64, 1025, 64).")
    return edges.step, edges[-1]


def edge_search(at: Callable[[int], Tuple[bool, int]], multiple: int, top: int,
                available: Optional[int], rank: int) -> Optional[int]:
    """The largest multiple of ``multiple`` up to ``top`` for which ``at(edge)`` (``(fits,
    bytes)``: the bytes needed, for a size that does not fit) fits; None if not even
    ``multiple`` does. Tries ``top`` first, then where a line through the refused sizes'
    bytes (against the voxels, ``edge ** rank``) meets ``available`` (bisecting without
    one), and stops when an edge fits and the next multiple is refused.

    >>> needs = lambda edge: 1000 + edge ** 3          # bytes a cube of that edge needs
    >>> tried = []
    >>> def at(edge):
    ...     tried.append(edge)
    ...     return needs(edge) <= 200_000, needs(edge)
    >>> edge_search(at, 8, 512, 200_000, 3), tried       # 58^3 fits, 59^3 does not
    (56, [512, 56, 64])
    """
    known: Dict[int, Tuple[bool, int]] = {}
    low, high = 0, top + multiple  # low fits (0: none yet), high does not
    edge = top
    while True:
        known[edge] = at(edge)
        if known[edge][0]:
            low = edge
        else:
            high = edge
        if high - low <= multiple:
            return low or None
        edge = _next_edge(known, low, high, multiple, available, rank)


def _next_edge(known, low, high, multiple, available, rank):
    """An edge strictly between ``low`` and ``high``: where the line through the two
    smallest refused sizes (one: through zero) reaches ``available``, or the middle."""
    refused = sorted((e, needs) for e, (fits, needs) in known.items() if not fits and needs)
    guess = None
    if available and refused:
        (e1, n1), (e2, n2) = refused[0], refused[min(1, len(refused) - 1)]
        v1, v2 = e1 ** rank, e2 ** rank
        slope = (n2 - n1) / (v2 - v1) if v2 != v1 else n1 / v1
        base = n1 - slope * v1 if v2 != v1 else 0.0
        if slope > 0 and available > base:
            guess = int(((available - base) / slope) ** (1 / rank)) // multiple * multiple
    if guess is None:
        guess = (low + high) // 2 // multiple * multiple
    return min(max(guess, low + multiple), high - multiple)


def _source(options):
    from spatial_tf.emulator.tpu import compiler_name, tpu_target

    return compiler_name(tpu_target(options.target))
