"""Strong scaling of one step: on each core count, the fastest spec the TPU compiler fits,
its predicted step time, examples per second, per-core memory and, with a price, the cost.

``scaling(step_or_model, inputs, cores=(1, 2, 4, 8), budget="v5e")`` runs ``plan`` once
per core count with the TPU compiler (libtpu) and keeps each plan's recommendation: the
fitting spec with the shortest predicted step (``TpuCompiledStep.step_time``). Where
adding cores stops paying shows in the speed-up column and the plot (``plot_scaling``).
Without libtpu there is no step time: the table says why and ranks memory only.
"""
import dataclasses
import time
from typing import Any, List, Optional, Sequence

from spatial_tf.emulator.tpu import seconds_text
from spatial_tf.planning.budgets import parse_budget
from spatial_tf.planning.options import PlanOptions
from spatial_tf.planning.plan import Candidate, Plan, plan
from spatial_tf.table import format_bytes, format_table, plural

__all__ = ["scaling", "Scaling", "ScalingRow", "plot_scaling"]


@dataclasses.dataclass(frozen=True)
class ScalingRow:
    """One core count: its plan and the plan's recommendation (None: nothing fits)."""

    num_cores: int
    plan: Plan
    batch: int
    chips: float  # chips of the replica (a v3 core is half a chip)

    @property
    def best(self) -> Optional[Candidate]:
        return self.plan.recommended

    @property
    def step_time(self) -> Optional[float]:
        return self.best.step_time if self.best is not None else None

    @property
    def examples_per_second(self) -> Optional[float]:
        """Examples one replica trains per second (the input's batch / step time)."""
        return self.batch / self.step_time if self.step_time else None

    def cost_per_1000(self, price_per_chip_hour: float) -> Optional[float]:
        """What 1,000 examples cost at ``price_per_chip_hour`` on this replica's chips."""
        if not self.step_time:
            return None
        return price_per_chip_hour * self.chips * self.step_time / 3600 * 1000 / self.batch


@dataclasses.dataclass(frozen=True)
class Scaling:
    """Every core count's best fitting spec and predicted time; see ``scaling``."""

    function: str
    shape: tuple
    budget: str
    rows: List[ScalingRow]
    source: Optional[str]           # the TPU compiler, or None (no libtpu: no times)
    price_per_chip_hour: Optional[float]
    seconds: float

    def speedup(self, row: ScalingRow) -> Optional[float]:
        """``row``'s step time against the fewest cores that fit (1.0 for those)."""
        timed = [r for r in self.rows if r.step_time]
        first, this = (timed[0].step_time if timed else None), row.step_time
        if not first or not this:
            return None
        return first / this * (row.batch / timed[0].batch)

    def __str__(self):
        headers = ["cores", "spec", "fits", "step est.", "examples/s", "speed-up",
                   "peak per core", "compiles"]
        if self.price_per_chip_hour is not None:
            headers.insert(6, "cost / 1k examples")
        rows = [self._cells(r) for r in self.rows]
        title = (f"{self.function}: {'x'.join(map(str, self.shape))}, strong scaling on "
                 f"{self.budget}: the fastest spec the TPU compiler fits per core count")
        lines = [format_table(headers, rows, title=title,
                              right=[h for h in headers if h not in ("spec", "fits")])]
        if self.source:
            lines.append(f"Step est. and fits: {self.source}; examples/s = the batch of "
                         f"{self.rows[0].batch} / step est.; speed-up against the fewest "
                         f"cores that fit.")
        else:
            lines.append("Step est.: none: XLA's TPU compiler (libtpu) is not installed, and "
                         "spatial_tf gives no time without it. Fix: pip install "
                         "'spatial-tf[tpu-compile]'.")
        if self.price_per_chip_hour is not None:
            lines.append(f"Cost at {self.price_per_chip_hour:g} per chip-hour for the "
                         f"replica's chips.")
        lines.append(f"Planned in {self.seconds:.1f} s.")
        return "\n".join(lines)

    def _cells(self, r):
        best, spec = r.best, "-"
        if best is not None:
            spec = "[" + ",".join(map(str, best.spec)) + "]"
        compiled = [c for c in r.plan.candidates if c.ok]
        cached = sum(c.cached for c in compiled)
        cells = [r.num_cores, spec, "yes" if best is not None else "no",
                 seconds_text(r.step_time) if r.step_time else "-",
                 f"{r.examples_per_second:,.1f}" if r.examples_per_second else "-",
                 f"{self.speedup(r):.2f}x" if self.speedup(r) else "-",
                 format_bytes(best.peak()) if best is not None else "-",
                 f"{len(compiled)}" + (f" ({cached} cached)" if cached else "")]
        if self.price_per_chip_hour is not None:
            cost = r.cost_per_1000(self.price_per_chip_hour)
            cells.insert(6, f"{cost:.3g}" if cost is not None else "-")
        return cells


def scaling(step_or_model: Any, inputs: Any, cores: Sequence[int] = (1, 2, 4, 8),
            budget: Any = "v5e", *, price_per_chip_hour: Optional[float] = None,
            options: Optional[PlanOptions] = None, training=None) -> Scaling:
    """Plan ``step_or_model`` on each of ``cores`` with ``budget``'s TPU compiler and keep
    each count's fastest fitting spec (arguments as ``plan``'s).

    Raises:
      ValueError: ``cores`` empty or not powers of two, a budget that names no TPU
        generation, or a price that is not positive.
    """
    start = time.perf_counter()
    counts = sorted({int(c) for c in cores}) if cores else []
    if not counts:
        raise ValueError(f"scaling: cores={cores!r}; expected core counts such as "
                         f"(1, 2, 4, 8). Fix: cores=(1, 2, 4, 8).")
    checked = parse_budget(budget)
    if checked.device is None:
        raise ValueError(f"scaling: budget={budget!r} names no TPU generation; expected one "
                         f"such as 'v5e' (its TPU compiler times each step). Fix: "
                         f"budget='v5e'.")
    if price_per_chip_hour is not None and not price_per_chip_hour > 0:
        raise ValueError(f"scaling: price_per_chip_hour={price_per_chip_hour!r}; expected a "
                         f"positive price. Fix: e.g. price_per_chip_hour=1.2.")
    from spatial_tf.tpu_generations import generation

    per_chip = generation(checked.name).devices_per_chip
    rows = []
    for n in counts:
        found = plan(step_or_model, inputs, n, checked, options=options, training=training)
        rows.append(ScalingRow(n, found, found.shape[0], n / per_chip))
    return Scaling(rows[0].plan.function, rows[0].plan.shape, checked.name, rows,
                   rows[0].plan.tpu_source, price_per_chip_hour, time.perf_counter() - start)


def plot_scaling(result: Scaling, path: str) -> str:
    """Write ``result``'s figure (step time and examples/s per chip against cores, with
    perfect scaling from the fewest cores that fit) to ``path``; return it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(f"plot_scaling: matplotlib is not installed ({e}). Fix: pip "
                          f"install \"spatial-tf[plot]\".") from e
    timed = [r for r in result.rows if r.step_time]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    if timed:
        x = [r.num_cores for r in timed]
        times = [float(r.step_time or 0) for r in timed]
        left.plot(x, times, "o-", label="predicted step time")
        left.plot(x, [times[0] * x[0] / n for n in x], "--", color="gray",
                  label=f"perfect scaling from {plural(x[0], 'core')}")
        right.plot(x, [r.batch / t / r.chips for r, t in zip(timed, times)], "o-")
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xticks([r.num_cores for r in result.rows],
                        [str(r.num_cores) for r in result.rows])
        axis.set_xlabel("cores per replica")
    left.set_ylabel("seconds per step")
    left.set_yscale("log")
    left.legend()
    right.set_ylabel("examples per second per chip")
    right.set_ylim(bottom=0)
    fig.suptitle(f"{result.function} {'x'.join(map(str, result.shape))} on {result.budget}"
                 f" ({'predicted by ' + result.source if result.source else 'no TPU compiler'})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
