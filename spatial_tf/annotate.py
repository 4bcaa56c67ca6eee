"""Apply a spec tree to nested tensors inside a step function.

``split`` validates the spec against the tensors, then annotates each tensor with its
sharding, returning the same nested structure:

- under a ``TPUStrategy`` (explicit, or the one in scope) it calls the strategy's
  ``experimental_split_to_logical_devices`` / ``experimental_replicate_to_logical_devices``
  / ``experimental_assign_to_logical_device`` per tensor (``PartialTile`` has no strategy
  method and is annotated directly, as those methods do);
- under ``spatial_tf.Emulator`` it annotates for the emulator's core count;
- anywhere else (default strategy, ``MirroredStrategy``) it emits the same XLA sharding
  annotations, which run as identity outside an SPMD compile.

>>> import numpy as np, tensorflow as tf
>>> @tf.function
... def step(batch):
...     batch = split(batch, {"image": [1, 2, 2, 1], "label": None})
...     return tf.reduce_sum(batch["image"])
>>> float(step({"image": tf.ones([2, 8, 8, 3]), "label": tf.zeros([2])}))
384.0
"""
import logging
from typing import Any, Optional

import tensorflow as tf

from spatial_tf import context, frames
from spatial_tf._tf_internals import tpu_layout, xla_sharding
from spatial_tf.spec import (
    VALID_CORES_PER_REPLICA,
    Assign,
    PartialTile,
    Replicate,
    Tile,
    check_cores,
    check_num_cores_per_replica,
    infer_num_cores,
    parse,
)

frames.register_exclusion(__file__)  # the user's line is never here

__all__ = ["split", "annotate_tensor", "leaf_sharding"]

_warned_unpartitioned = False


def leaf_sharding(leaf: Any, num_cores: int) -> Any:
    """The ``xla_sharding.Sharding`` for a spec leaf on ``num_cores`` logical cores.

    >>> print(leaf_sharding(Tile(1, 2), 2).proto)  # doctest: +NORMALIZE_WHITESPACE
    type: OTHER tile_assignment_dimensions: 1 tile_assignment_dimensions: 2
    tile_assignment_devices: 0 tile_assignment_devices: 1
    """
    if isinstance(leaf, Replicate):
        return xla_sharding.Sharding.replicate()
    if isinstance(leaf, Assign):
        return xla_sharding.Sharding.assign_device(leaf.core)
    if isinstance(leaf, PartialTile):
        return xla_sharding.Sharding.partial_tile(leaf.tile_assignment(num_cores))
    if isinstance(leaf, Tile):
        return xla_sharding.Sharding.tile(leaf.tile_assignment(num_cores))
    raise TypeError(
        f"{leaf!r} ({type(leaf).__name__}) is not a spatial_tf spec leaf. Expected Tile, "
        f"PartialTile, Replicate or Assign. Fix: parse the spec first (spatial_tf.spec.parse)."
    )


@tf.autograph.experimental.do_not_convert
def annotate_tensor(tensor: Any, leaf: Any, num_cores: int) -> tf.Tensor:
    """Attach ``leaf``'s XLA sharding to ``tensor`` through an identity ``XlaSharding`` op.

    A low-level helper: it does not check ``leaf`` against the tensor or refuse
    ``Assign`` under SPMD; ``spatial_tf.split`` does. In a graph the op carries the
    ``_XlaSharding`` attribute that XLA reads; run eagerly nothing compiles it, so the
    tensor is returned through ``tf.identity``.

    >>> annotate_tensor(tf.zeros([4, 8]), Tile(1, 2), 2).shape
    TensorShape([4, 8])
    """
    sharding = leaf_sharding(leaf, num_cores)
    if tf.executing_eagerly():
        return tf.identity(tensor)
    return sharding.apply_to_tensor(tensor, use_sharding_op=True)


@tf.autograph.experimental.do_not_convert
def split(inputs: Any, spec: Any, strategy: Any = None, *,
          num_cores_per_replica: Optional[int] = None) -> Any:
    """Return ``inputs`` annotated per ``spec``, in the same nested structure.

    Args:
      inputs: a tensor or a dict/list/tuple/namedtuple of tensors.
      spec: a spec tree mirroring ``inputs`` (see ``spatial_tf.spec.validation``);
        TPUEstimator's ``input_partition_dims`` forms are accepted as they are.
      strategy: a ``TPUStrategy`` or ``spatial_tf.Emulator``; by default the active
        emulator, else the strategy in scope.
      num_cores_per_replica: the core count when no TPU strategy or emulator supplies
        one; inferred from the spec's largest ``Tile`` otherwise (messages then say so).

    Raises:
      ValueError, TypeError: the spec does not fit the inputs (message names the path).

    >>> import numpy as np
    >>> split(tf.zeros([2, 16]), np.array([1, 4])).shape      # 4 cores, from the spec
    TensorShape([2, 16])
    """
    tree = parse(inputs, spec)
    target = _resolve_target(strategy, num_cores_per_replica)
    if target is None:  # nothing gives the core count: the spec's largest Tile does
        cores, source = infer_num_cores(tree)
        if cores not in VALID_CORES_PER_REPLICA:
            raise ValueError(
                f"{source}: splits into {cores} pieces, the core count inferred for this "
                f"spec as no TPUStrategy, Emulator or num_cores_per_replica= gives one. "
                f"Expected a product in {list(VALID_CORES_PER_REPLICA)} (cores per replica). "
                f"Fix: choose split counts whose product is one of these."
            )
        target = _AnnotationTarget(cores, partitioned=False)
        tree = check_cores(inputs, tree, cores, source=source or "a spec without Tile")
    else:
        tree = check_cores(inputs, tree, target.num_cores)
    flat = [x if tf.is_tensor(x) else tf.convert_to_tensor(x) for x in tf.nest.flatten(inputs)]
    out = [
        target.annotate(x, leaf) for x, leaf in zip(flat, tf.nest.flatten(tree), strict=True)
    ]
    return tf.nest.pack_sequence_as(inputs, out)


# ---------------------------------------------------------------- where annotations go


class _StrategyTarget:
    """Annotate through a TPUStrategy's own logical-device methods."""

    def __init__(self, strategy):
        self.strategy = strategy
        layout = tpu_layout(strategy)
        self.num_cores = layout.num_cores_per_replica
        self.spmd = layout.spmd

    def annotate(self, x, leaf):
        s = self.strategy
        if isinstance(leaf, Replicate):
            return s.experimental_replicate_to_logical_devices(x)
        if isinstance(leaf, Assign):
            if self.spmd:
                _refuse_assign(leaf, "TPUStrategy")
            return s.experimental_assign_to_logical_device(x, leaf.core)
        if isinstance(leaf, PartialTile):
            return annotate_tensor(x, leaf, self.num_cores)
        return s.experimental_split_to_logical_devices(x, list(leaf.dims))


class _AnnotationTarget:
    """Emit XLA sharding annotations directly for ``num_cores`` logical cores.

    ``partitioned``: an SPMD compile will act on them (the emulator); like TPUStrategy
    in SPMD mode it then refuses ``Assign``, so what runs here also runs on a TPU.
    """

    def __init__(self, num_cores, partitioned):
        self.num_cores = num_cores
        self.partitioned = partitioned

    def annotate(self, x, leaf):
        if self.partitioned and isinstance(leaf, Assign):
            _refuse_assign(leaf, "spatial_tf.Emulator (like TPUStrategy in SPMD mode)")
        if not self.partitioned and self.num_cores > 1:
            _warn_unpartitioned_once()
        return annotate_tensor(x, leaf, self.num_cores)


def _refuse_assign(leaf, where):
    raise ValueError(
        f"{leaf!r}: {where} does not allow assigning a tensor to one logical core when "
        f"experimental_spmd_xla_partitioning=True. Fix: use Replicate() (or None) or a "
        f"Tile for this tensor."
    )


def _resolve_target(strategy, num_cores_per_replica):
    """Where annotations go; None when the core count must come from the spec."""
    if strategy is None:
        layout = context.current_layout()
        if layout is not None:
            return _AnnotationTarget(layout.num_cores_per_replica, partitioned=True)
        strategy = tf.distribute.get_strategy()
    if isinstance(strategy, context.EmulatedLayout):
        return _AnnotationTarget(strategy.num_cores_per_replica, partitioned=True)
    if isinstance(strategy, context.TPUStrategyLike):
        return _StrategyTarget(strategy)
    if num_cores_per_replica is None:
        return None
    return _AnnotationTarget(
        check_num_cores_per_replica(num_cores_per_replica), partitioned=False
    )


def _warn_unpartitioned_once():
    global _warned_unpartitioned
    if _warned_unpartitioned:
        return
    _warned_unpartitioned = True
    logging.getLogger("spatial_tf").warning(
        "spatial_tf.split: no TPUStrategy or spatial_tf.Emulator is active, so the "
        "sharding annotations are recorded but nothing partitions the computation here "
        "(they run as identity). Run the step under a TPUStrategy or spatial_tf.Emulator "
        "to partition it."
    )
