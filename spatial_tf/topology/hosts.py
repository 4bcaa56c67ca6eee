"""Which host feeds which replicas: per-host input pipelines for pod slices.

``TPUStrategy`` places each replica's input on the host of its logical core 0 and runs one
input pipeline per such host (``TPUExtended._device_input_worker_devices``, in replica
order). ``input_contexts`` derives the same ``tf.distribute.InputContext`` s from a
``DeviceAssignment`` alone, so a pipeline can be planned and tested without a TPU.
When a replica spans hosts (more cores per replica than a host has), only the host of its
logical core 0 feeds it, and the other hosts run no input pipeline.

>>> from spatial_tf.topology import device_assignment, synthetic
>>> da = device_assignment(synthetic("v3-32"), num_cores_per_replica=8)
>>> [(f.task, f.replicas) for f in host_feeds(da)]     # TensorFlow orders replicas in a ring
[(0, (0,)), (1, (1,)), (3, (2,)), (2, (3,))]
>>> ctx = input_contexts(da)[1]
>>> ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync
(4, 1, 4)
"""
import dataclasses
from typing import Any, Dict, List, Optional

import tensorflow as tf

from spatial_tf.table import plural

__all__ = ["HostFeed", "host_feeds", "input_contexts", "batch_hints"]


@dataclasses.dataclass(frozen=True)
class HostFeed:
    """One input pipeline: the task that runs it and the replicas it feeds."""

    task: int
    host_device: str
    replicas: tuple
    input_context: tf.distribute.InputContext = dataclasses.field(repr=False)


def host_feeds(device_assignment: Any, job: str = "worker") -> List["HostFeed"]:
    """One ``HostFeed`` per host that feeds replicas, in ``TPUStrategy``'s order.

    ``job`` is the TPU workers' job name (``TPUClusterResolver``'s default, ``worker``).
    """
    da = _check_assignment(device_assignment)
    fed: Dict[int, List[int]] = {}  # task -> replicas, in order of first appearance
    for replica in range(da.num_replicas):
        task = int(da.topology.task_ordinal_at_coordinates(da.coordinates(replica, 0)))
        fed.setdefault(task, []).append(replica)
    feeds = []
    for pipeline_id, (task, replicas) in enumerate(fed.items()):
        context = tf.distribute.InputContext(
            num_input_pipelines=len(fed),
            input_pipeline_id=pipeline_id,
            num_replicas_in_sync=da.num_replicas,
        )
        host = f"/job:{job}/replica:0/task:{task}/device:CPU:0"
        feeds.append(HostFeed(task, host, tuple(replicas), context))
    return feeds


def input_contexts(device_assignment: Any) -> List[tf.distribute.InputContext]:
    """The ``tf.distribute.InputContext`` of each input pipeline, as TPUStrategy makes them.

    Use them to test a ``dataset_fn`` for ``distribute_datasets_from_function`` off TPU:
    ``[dataset_fn(ctx) for ctx in input_contexts(da)]``.
    """
    return [feed.input_context for feed in host_feeds(device_assignment)]


def batch_hints(device_assignment: Any, global_batch_size: Optional[int] = None) -> List[str]:
    """Lines of advice on global and per-host batch sizes for this assignment."""
    da = _check_assignment(device_assignment)
    feeds = host_feeds(da)
    replicas = da.num_replicas
    all_tasks = da.topology.num_tasks
    lines = [f"global batch must be a multiple of {replicas} (num_replicas_in_sync)."]
    per_host = sorted({len(f.replicas) for f in feeds})
    lines.append(
        f"{plural(len(feeds), 'input pipeline')}, one per host that feeds replicas, each "
        f"feeding {_or(per_host)} {'replica' if per_host == [1] else 'replicas'}: per-host "
        f"batch = global_batch / {replicas} x "
        f"{_or(per_host)}."
    )
    idle = all_tasks - len(feeds)
    if idle:
        lines.append(
            f"{idle} of {all_tasks} hosts run no input pipeline: their cores belong to "
            f"replicas fed from the host of each replica's logical core 0."
        )
    if global_batch_size is not None:
        lines.append(_check_global_batch(global_batch_size, replicas, feeds))
    return lines


def _check_global_batch(global_batch_size, replicas, feeds):
    if global_batch_size % replicas:
        lower = global_batch_size - global_batch_size % replicas
        nearest = f"{lower} or {lower + replicas}" if lower else f"{replicas}"
        return (
            f"global batch {global_batch_size} is NOT a multiple of {replicas}; use "
            f"{nearest}."
        )
    per_replica = global_batch_size // replicas
    sizes = sorted({per_replica * len(f.replicas) for f in feeds})
    return (
        f"global batch {global_batch_size}: {per_replica} per replica, "
        f"{_or(sizes)} per host."
    )


def _or(values):
    return " or ".join(map(str, values))


def _check_assignment(device_assignment):
    if not isinstance(device_assignment, tf.tpu.experimental.DeviceAssignment):
        raise TypeError(
            f"device_assignment is {device_assignment!r} "
            f"({type(device_assignment).__name__}); expected a "
            f"tf.tpu.experimental.DeviceAssignment, e.g. from "
            f"spatial_tf.topology.device_assignment(...)."
        )
    return device_assignment
