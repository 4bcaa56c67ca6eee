"""Input pipelines for the emulator, shaped like ``TPUStrategy``'s.

The emulator runs one program over all ``num_replicas x num_cores_per_replica`` virtual
devices, so the step function receives the *global* batch; ``num_replicas > 1`` splits
its leading axis over the replicas inside that program. These helpers check and build
such global batches.

>>> import tensorflow as tf
>>> ds = tf.data.Dataset.range(8).batch(2, drop_remainder=True)
>>> [b.numpy().tolist() for b in rebatch_per_replica(ds, 2).take(2)]
[[0, 1, 2, 3], [4, 5, 6, 7]]
"""
import tensorflow as tf

__all__ = ["check_global_batch", "rebatch_per_replica"]


def check_global_batch(element_spec, num_replicas, what="dataset"):
    """Raise ``ValueError`` unless every element's axis 0 is static and splits evenly."""
    if num_replicas == 1:
        return
    for path, spec in _specs_with_paths(element_spec, what):
        size = spec.shape[0] if spec.shape.rank else None
        if spec.shape.rank == 0:
            raise ValueError(
                f"{path} is a scalar; with num_replicas={num_replicas} every element is "
                f"split along its batch axis (axis 0), as TPUStrategy does. Fix: batch the "
                f"dataset."
            )
        if size is None:
            raise ValueError(
                f"{path} has shape {spec.shape}, with an unknown batch size; with "
                f"num_replicas={num_replicas} the batch is split over replicas and must be "
                f"fixed. Fix: dataset.batch(global_batch, drop_remainder=True)."
            )
        if size % num_replicas:
            raise ValueError(
                f"{path} has batch size {size}, which does not split evenly over "
                f"num_replicas={num_replicas}. Fix: use a global batch size that is a "
                f"multiple of {num_replicas}."
            )


def rebatch_per_replica(dataset, num_replicas):
    """Concatenate ``num_replicas`` consecutive per-replica batches into global batches."""
    if num_replicas == 1:
        return dataset
    spec = dataset.element_spec
    for path, leaf_spec in _specs_with_paths(spec, "dataset_fn(...)"):
        if leaf_spec.shape.rank == 0:
            raise ValueError(
                f"{path} is a scalar; per-replica batches are joined along axis 0 into the "
                f"global batch. Fix: batch the per-replica dataset."
            )

    def merge(*parts):
        batch = parts if isinstance(spec, tuple) else parts[0]
        return tf.nest.map_structure(_merge_leading_axes, batch, spec)

    def _merge_leading_axes(t, leaf_spec):
        shape = leaf_spec.shape
        merged = tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
        first = None if shape[0] is None else shape[0] * num_replicas
        merged.set_shape([first] + shape[1:].as_list())
        return merged

    return dataset.batch(num_replicas, drop_remainder=True).map(merge)


def _specs_with_paths(element_spec, root):
    from spatial_tf.spec.paths import flatten_with_paths

    return [(p, s) for p, s in flatten_with_paths(element_spec, root) if isinstance(s, tf.TensorSpec)]
