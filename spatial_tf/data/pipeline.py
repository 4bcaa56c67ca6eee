"""Per-host input pipelines: the TF2 form of TPUEstimator's ``PER_HOST_V2``.

``distribute`` calls ``strategy.distribute_datasets_from_function``: each host builds
its own pipeline from its ``tf.distribute.InputContext``, batched per replica
(global batch / replicas) with static shapes, checked against the spec tree before any
device time, and prefetched.

>>> import tensorflow as tf
>>> def dataset_fn(context):
...     return tf.data.Dataset.from_tensors({"image": tf.zeros([8, 8, 1])}).repeat()
>>> ds = distribute(tf.distribute.get_strategy(), dataset_fn, 4, spec={"image": [1, 2, 2, 1]})
>>> next(iter(ds))["image"].shape.as_list()
[4, 8, 8, 1]
"""
from typing import Any, Callable, Optional
import numbers

import tensorflow as tf

from spatial_tf import context
from spatial_tf._tf_internals import tpu_layout
from spatial_tf.spec import flatten_with_paths, infer_num_cores, parse, validate

__all__ = ["distribute"]


def distribute(strategy: tf.distribute.Strategy,
               dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset],
               global_batch_size: int, spec: Any = None, *,
               num_cores_per_replica: Optional[int] = None, prefetch: int = tf.data.AUTOTUNE,
               options: Optional[tf.distribute.InputOptions] = None) -> Any:
    """A distributed dataset of per-replica batches built on every host.

    Args:
      strategy: a ``tf.distribute.Strategy`` (TPUStrategy, ``spatial_tf.Emulator``,
        MirroredStrategy, the default strategy).
      dataset_fn: ``dataset_fn(input_context) -> tf.data.Dataset`` of **unbatched**
        examples for this host (shard files by ``input_context.input_pipeline_id`` as
        usual); ``distribute`` batches them.
      global_batch_size: examples per step over all replicas; must divide by
        ``strategy.num_replicas_in_sync``.
      spec: the spec tree of one batch (batch axis included), checked against the
        batched ``element_spec`` with ``spatial_tf.validate``.
      num_cores_per_replica: the cores each replica is split over; by default the
        strategy's (TPUStrategy, Emulator), else the largest split count in ``spec``.
      prefetch: batches to prefetch (``tf.data.AUTOTUNE``; 0 for none).
      options: passed to ``distribute_datasets_from_function``.

    Raises:
      ValueError: the batch does not divide, a feature has a size unknown at pipeline
        build time (named by its path), or the spec does not fit the batches.
    """
    replicas = strategy.num_replicas_in_sync
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, numbers.Integral) \
            or global_batch_size < 1:
        raise ValueError(f"distribute: global_batch_size is {global_batch_size!r}; expected a "
                         f"positive int.")
    if global_batch_size % replicas:
        lower = global_batch_size - global_batch_size % replicas
        raise ValueError(
            f"distribute: global_batch_size {global_batch_size} does not divide over "
            f"{replicas} replicas. Expected a multiple of {replicas}. Fix: use "
            f"{lower or replicas} or {lower + replicas}."
        )
    per_replica = global_batch_size // replicas  # = InputContext.get_per_replica_batch_size
    if spec is not None and num_cores_per_replica is None:
        num_cores_per_replica = _cores(strategy)

    def build(context):
        dataset = dataset_fn(context)
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(f"distribute: dataset_fn returned {type(dataset).__name__}; "
                            f"expected a tf.data.Dataset of unbatched examples.")
        dataset = dataset.batch(per_replica, drop_remainder=True)
        check_static(dataset.element_spec)
        if spec is not None:
            cores = num_cores_per_replica
            if cores is None:  # no partitioning strategy: the spec's largest split
                cores = infer_num_cores(parse(dataset.element_spec, spec))[0]
            validate(dataset.element_spec, spec, cores)
        return dataset.prefetch(prefetch) if prefetch else dataset

    return strategy.distribute_datasets_from_function(build, options)


def check_static(element_spec: Any) -> None:
    """Raise naming the first feature whose shape is not fully known.

    >>> import tensorflow as tf
    >>> check_static({"image": tf.TensorSpec([2, None, 8])})
    Traceback (most recent call last):
    ...
    ValueError: distribute: inputs['image'] has shape (2, None, 8), with an unknown size on axis 1. Expected static sizes: XLA compiles one program per shape and splits need known sizes. Fix: resize, crop or pad every example to one size (spatial_tf.data.pad_to_multiple) in dataset_fn.
    """
    for path, leaf in flatten_with_paths(element_spec):
        shape = getattr(leaf, "shape", None)
        if shape is None:
            continue
        if shape.rank is None:
            raise ValueError(f"distribute: {path} has unknown rank. Expected static shapes. Fix: "
                             f"set shapes in dataset_fn (tf.ensure_shape).")
        unknown = [i for i, s in enumerate(shape) if s is None]
        if unknown:
            raise ValueError(
                f"distribute: {path} has shape {tuple(shape)}, with an unknown size on axis "
                f"{unknown[0]}. Expected static sizes: XLA compiles one program per shape and "
                f"splits need known sizes. Fix: resize, crop or pad every example to one size "
                f"(spatial_tf.data.pad_to_multiple) in dataset_fn."
            )


def _cores(strategy):
    """The cores per replica ``strategy`` splits over; None for a non-partitioning one."""
    if isinstance(strategy, context.EmulatedLayout):
        return strategy.num_cores_per_replica
    if isinstance(strategy, context.TPUStrategyLike):
        return tpu_layout(strategy).num_cores_per_replica
    return None
