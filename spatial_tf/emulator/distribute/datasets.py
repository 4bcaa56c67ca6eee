"""Checks on the datasets an ``Emulator`` distributes, made before any step runs.

As on TPUStrategy, ``experimental_distribute_dataset`` takes global batches and gives
each replica ``global_batch / num_replicas`` consecutive examples, and
``distribute_datasets_from_function`` takes per-replica batches. A batch size known when
the dataset is built must divide evenly over the replicas; an unknown one (``batch()``
without ``drop_remainder``) is split when each batch arrives, and a step whose replicas
then get batches of different sizes is refused when it runs (TPUStrategy pads those
with XLA's dynamic padder).

>>> import tensorflow as tf
>>> ds = tf.data.Dataset.range(8).batch(3, drop_remainder=True)
>>> check_global_batch(ds.element_spec, 2)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: dataset has batch size 3, which does not split evenly over num_replicas=2: ...
"""
import tensorflow as tf

__all__ = ["check_global_batch"]


def check_global_batch(element_spec, num_replicas, what="dataset"):
    """Raise ``ValueError`` if an element is a scalar or its static batch size (axis 0)
    does not split evenly over the replicas."""
    if num_replicas == 1:
        return
    for path, spec in _specs_with_paths(element_spec, what):
        if spec.shape.rank == 0:
            raise ValueError(
                f"{path} is a scalar; with num_replicas={num_replicas} every element is "
                f"split along its batch axis (axis 0), as TPUStrategy does. Fix: batch the "
                f"dataset."
            )
        size = spec.shape[0] if spec.shape.rank else None
        if size is not None and size % num_replicas:
            raise ValueError(
                f"{path} has batch size {size}, which does not split evenly over "
                f"num_replicas={num_replicas}: each replica would get a different number "
                f"of examples. Fix: use a global batch size that is a multiple of "
                f"{num_replicas}."
            )


def _specs_with_paths(element_spec, root):
    from spatial_tf.spec import flatten_with_paths

    return [(p, s) for p, s in flatten_with_paths(element_spec, root)
            if isinstance(s, tf.TensorSpec)]
