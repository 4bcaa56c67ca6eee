"""The partition planner: which spec, on how many cores, fits the per-core memory budget
with the least communication.

``plan(step_or_model, inputs, num_cores_per_replica, budget)`` compiles every candidate
spec on the emulator and ranks them (``plan.py``); ``candidate_specs`` enumerates them,
``parse_budget`` reads budgets (``"v3"``, ``"16GiB"``, bytes), ``LinearFit`` predicts
sizes too large to compile, ``tpu_memory`` estimates TPU's tile padding, ``plot`` draws a
plan's figure (matplotlib, imported when it is called), and ``plan_partition_friendly``
shows a user's model before and after
``spatial_tf.layers.partition_friendly``. With libtpu installed, ``search_fewest_cores``
and ``search_largest_edge`` answer "on how many cores" and "how large" by TPU compiles,
and ``scaling`` the fastest fitting spec and its predicted step time per core count.

>>> from spatial_tf import planning
>>> planning.candidate_specs((1, 64, 64, 64, 1), 4)
[(1, 4, 1, 1, 1), (1, 2, 2, 1, 1)]
>>> planning.parse_budget("v4").device_bytes // 2**30
32
"""
from spatial_tf.planning.budgets import HBM_PER_DEVICE, RESERVE_FRACTION, Budget, parse_budget
from spatial_tf.planning.candidates import candidate_specs
from spatial_tf.planning.compile_all import INTERRUPTED
from spatial_tf.planning.fit import LinearFit, fewest_cores, largest_edge
from spatial_tf.planning.friendly import FriendlyPlans, plan_partition_friendly
from spatial_tf.planning.options import PlanOptions, Training
from spatial_tf.planning.plan import Candidate, Plan, plan
from spatial_tf.planning.plot import plot
from spatial_tf.planning.scaling import Scaling, plot_scaling, scaling
from spatial_tf.planning.search import Search, search_fewest_cores, search_largest_edge
from spatial_tf.planning.tpu_memory import TpuEstimate, padded_bytes

__all__ = [
    "plan", "Plan", "Candidate", "PlanOptions", "Training", "candidate_specs", "parse_budget", "Budget",
    "HBM_PER_DEVICE", "RESERVE_FRACTION", "LinearFit", "largest_edge", "fewest_cores",
    "padded_bytes", "TpuEstimate", "plan_partition_friendly", "FriendlyPlans",
    "search_fewest_cores", "search_largest_edge", "Search", "scaling", "Scaling",
    "plot_scaling", "plot", "INTERRUPTED",
]
