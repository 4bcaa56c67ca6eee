"""Each candidate spec of a user's model before and after ``partition_friendly``.

``plan_partition_friendly(model, inputs, num_cores_per_replica, **plan_options)`` plans
the model as it is, makes it partition-friendly (in place: the model stays so
afterwards, as ``spatial_tf.layers.partition_friendly`` leaves it) and plans it again,
with the same candidates and options. ``str()`` of the result is one table, a row per
spec.

>>> import keras
>>> inputs = keras.Input((8, 8, 8, 1))
>>> conv = keras.layers.Conv3D(2, 3, padding="same", name="conv")
>>> model = keras.Model(inputs, conv(inputs), name="net")
>>> result = plan_partition_friendly(model, (1, 8, 8, 8, 1), 2,
...                                  options=PlanOptions(progress=False))
>>> [(c.path, c.after != "unchanged") for c in result.changes]
[('net/conv', True)]
>>> result.before.candidates[0].spec == result.after.candidates[0].spec
True
"""
import dataclasses
from typing import Any, List, Optional

from spatial_tf.planning.budgets import parse_budget
from spatial_tf.planning.options import PlanOptions
from spatial_tf.planning.plan import Plan, plan
from spatial_tf.table import format_bytes, format_table, plural

__all__ = ["FriendlyPlans", "plan_partition_friendly"]


@dataclasses.dataclass
class FriendlyPlans:
    """The plans of one model before and after ``partition_friendly``, and its changes."""

    before: Plan
    after: Plan
    changes: List[Any]

    def rows(self) -> List[list]:
        after = {c.spec: c for c in self.after.candidates}
        rows = []
        for old in self.before.candidates:
            new = after.get(old.spec)
            basis = self.before.memory
            rows.append([",".join(map(str, old.spec)), _cell(old, basis), _cell(new, basis),
                         _cell(old, None), _cell(new, None),
                         len(old.resharding_ops), len(new.resharding_ops) if new else "-"])
        return rows

    def __str__(self) -> str:
        from spatial_tf.partition_friendly import changed_layers

        changed = len(changed_layers(self.changes))
        return format_table(
            ["spec", "peak as written", "peak friendly", "resharding as written",
             "resharding friendly", "gathered ops as written", "gathered ops friendly"],
            self.rows(),
            right=("peak as written", "peak friendly", "resharding as written",
                   "resharding friendly", "gathered ops as written", "gathered ops friendly"),
            title=(f"{self.before.function} on {plural(self.before.num_cores, 'core')}, per core "
                   f"({self.before.memory.upper()} peak), before and after "
                   f"partition_friendly ({plural(changed, 'layer')} changed)"),
        )


def _cell(candidate, basis):
    """The peak on ``basis`` ("tpu"/"cpu"), or with None the resharding bytes."""
    if candidate is None or not candidate.ok:
        return "fails"
    return format_bytes(candidate.peak(basis) if basis else candidate.resharding_bytes)


def plan_partition_friendly(model: Any, inputs: Any, num_cores_per_replica: int, *,
                            halo: Optional[bool] = None, **plan_options) -> FriendlyPlans:
    """Plan ``model`` as written, make it partition-friendly in place, plan it again.

    ``plan_options`` are ``plan``'s (``budget``, ``specs``, ``options``, ``training``); both plans use
    the same candidate specs, those of the first plan. A compiled model's optimizer (the
    one ``fit`` steps with) is made to keep the gradients whole too. A TPU ``budget``
    (``"v5e"``) is ``partition_friendly``'s ``target``, and ``halo`` its ``halo``: plan a
    fresh model with each to compare the forms.
    """
    from spatial_tf.partition_friendly import partition_friendly

    budget = plan_options.get("budget")
    generation = None if budget is None else parse_budget(budget).generation
    before = plan(model, inputs, num_cores_per_replica, **plan_options)
    changes = partition_friendly(model, optimizer=getattr(model, "optimizer", None), halo=halo,
                                 target=None if generation is None else generation.name)
    options = dict(plan_options, specs=[c.spec for c in before.candidates])
    after = plan(model, inputs, num_cores_per_replica, **options)
    return FriendlyPlans(before, after, changes)
