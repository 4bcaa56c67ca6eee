"""Several hosts' input pipelines: the pod bugs caught before the pod.

On a pod slice every host builds its own input pipeline: TensorFlow's input library
(``tensorflow/python/distribute/input_lib.py``, the one the emulator runs) calls
``dataset_fn`` once per host with an ``InputContext`` (``input_pipeline_id``,
``num_input_pipelines``), and ``experimental_distribute_dataset`` shards the global
dataset across hosts by its auto-shard policy
(``tensorflow/python/distribute/input_ops.py``). The classic bug is a pipeline that
ignores its context: every host reads the same examples, so the replicas train on
copies. ``identical_hosts`` tells that from a step's per-replica inputs;
``check_host_specs`` refuses hosts whose datasets yield different element shapes.

Which host feeds which replica (``HostLayout``): TensorFlow concatenates the hosts'
per-replica batches in input-worker order and hands replica ``i`` the ``i``-th
(``DistributedIterator.get_next`` in ``input_lib.py``, then ``select_replica(i, args)``
in ``TPUExtended.tpu_run``); ``TPUExtended._device_input_worker_devices`` orders the
hosts by their first replica. With a topology the emulator derives both from the
``DeviceAssignment`` as ``tpu_strategy`` builds it; a replica whose cores sit on
another host than the pipeline feeding it gets its batch across hosts on a TPU.

>>> import numpy as np
>>> same = [[np.arange(2)], [np.arange(2) + 2], [np.arange(2)], [np.arange(2) + 2]]
>>> identical_hosts(same, [0], even_layout(4, 2).pipeline_of_replica)
True
>>> layout = topology_layout("v4-32", num_cores_per_replica=2)
>>> layout.pipeline_of_replica, layout.replica_tasks
((0, 0, 1, 1, 2, 2, 3, 3), (0, 0, 1, 2, 3, 3, 2, 1))
"""
import dataclasses
from typing import Any, List, Optional, Sequence

import numpy as np
import tensorflow as tf

__all__ = ["HostLayout", "even_layout", "topology_layout", "IdenticalHostInputWarning",
           "distributed_indices", "identical_hosts", "identical_hosts_message",
           "check_host_specs"]


@dataclasses.dataclass(frozen=True)
class HostLayout:
    """The hosts' input pipelines and the replicas each feeds, as ``TPUStrategy`` has them.

    ``replicas_per_pipeline[h]``: how many replicas pipeline ``h`` (``input_pipeline_id``)
    feeds. From a topology also ``pipeline_tasks[h]``, the TPU host (task) running
    pipeline ``h``; ``replica_tasks[r]``, the task of replica ``r``'s logical core 0;
    ``core_tasks[r][c]``, the task of each logical core; and ``device_assignment``.
    """

    replicas_per_pipeline: tuple
    pipeline_tasks: Optional[tuple] = None
    replica_tasks: Optional[tuple] = None
    core_tasks: Optional[tuple] = None
    device_assignment: Any = dataclasses.field(default=None, repr=False, compare=False)
    slice_name: Optional[str] = None

    @property
    def num_hosts(self) -> int:
        return len(self.replicas_per_pipeline)

    @property
    def pipeline_of_replica(self) -> tuple:
        """Replica ``r`` is fed by pipeline ``pipeline_of_replica[r]`` (by position)."""
        return tuple(h for h, n in enumerate(self.replicas_per_pipeline) for _ in range(n))

    def fed_across_hosts(self) -> tuple:
        """Replicas whose batch comes from a pipeline on another task than their core 0."""
        if self.replica_tasks is None or self.pipeline_tasks is None:
            return ()
        pipeline_tasks, replica_tasks = self.pipeline_tasks, self.replica_tasks
        return tuple(r for r, h in enumerate(self.pipeline_of_replica)
                     if pipeline_tasks[h] != replica_tasks[r])


def even_layout(num_replicas: int, num_hosts: int) -> HostLayout:
    """``num_hosts`` pipelines feeding ``num_replicas // num_hosts`` replicas each."""
    return HostLayout((num_replicas // num_hosts,) * num_hosts)


def topology_layout(topology: Any, num_cores_per_replica: int,
                    num_replicas: Optional[int] = None) -> HostLayout:
    """The layout ``tpu_strategy`` would give on ``topology`` (a slice name such as
    ``"v4-32"`` or a ``tf.tpu.experimental.Topology``): replicas from its
    ``DeviceAssignment``, one pipeline per host of a replica's logical core 0."""
    from spatial_tf.topology import device_assignment, host_feeds, slice_label, synthetic

    if isinstance(topology, str):
        topology = synthetic(topology)
    elif not isinstance(topology, tf.tpu.experimental.Topology):
        raise TypeError(
            f"Emulator: topology is {topology!r} ({type(topology).__name__}); expected a "
            f"slice name such as 'v4-32' or a tf.tpu.experimental.Topology. Fix: "
            f"Emulator(num_cores_per_replica, topology='v4-32')."
        )
    da = device_assignment(topology, num_cores_per_replica=num_cores_per_replica,
                           num_replicas=num_replicas)

    def task(replica, core):
        return int(da.topology.task_ordinal_at_coordinates(da.coordinates(replica, core)))

    feeds = host_feeds(da)
    cores = tuple(tuple(task(r, c) for c in range(da.num_cores_per_replica))
                  for r in range(da.num_replicas))
    return HostLayout(
        replicas_per_pipeline=tuple(len(f.replicas) for f in feeds),
        pipeline_tasks=tuple(f.task for f in feeds),
        replica_tasks=tuple(c[0] for c in cores),
        core_tasks=cores,
        device_assignment=da,
        slice_name=slice_label(topology),
    )


class IdenticalHostInputWarning(UserWarning):
    """Every host fed its replicas the same batches: the input is not sharded by host."""


def distributed_indices(args, kwargs) -> List[int]:
    """Positions, among a call's tensor arguments, of those given as per-replica values
    (from a distributed dataset); the others are passed whole to every replica."""
    indices, position = [], 0
    for leaf in tf.nest.flatten((tuple(args), dict(kwargs or {}))):
        if isinstance(leaf, tf.Variable):  # a distributed variable: captured, no argument
            continue
        if isinstance(leaf, tf.distribute.DistributedValues):
            indices.append(position)
            position += 1
        elif tf.is_tensor(leaf) or isinstance(leaf, np.ndarray):
            position += 1
    return indices


def identical_hosts(per_replica_args: Sequence[Sequence], indices: Sequence[int],
                    pipeline_of_replica: Sequence[int]) -> bool:
    """Whether every host's replicas got exactly host 0's replicas' per-replica inputs
    (``pipeline_of_replica[r]``: the host feeding replica ``r``)."""
    fed: dict = {}
    for replica, host in enumerate(pipeline_of_replica):
        fed.setdefault(host, []).append(replica)
    if len(fed) < 2 or not indices:
        return False

    def inputs(host):
        return [np.asarray(per_replica_args[r][i]) for r in fed[host] for i in indices]

    first = inputs(0)

    def same_as_first(host):
        theirs = inputs(host)
        return len(theirs) == len(first) and all(
            np.array_equal(a, b) for a, b in zip(first, theirs))

    return all(same_as_first(h) for h in list(fed)[1:])


def identical_hosts_message(step_name: str, num_hosts: int) -> str:
    return (
        f"spatial_tf.Emulator: in the step {step_name}, all {num_hosts} hosts fed their "
        f"replicas the same batches (hosts 0 to {num_hosts - 1}), so the replicas train on "
        f"copies of the same examples. On a pod every host runs the input pipeline; "
        f"each must read its own share. Fix: shard by host in dataset_fn, "
        f"dataset.shard(context.num_input_pipelines, context.input_pipeline_id), or let "
        f"experimental_distribute_dataset shard it (do not set its auto-shard policy to OFF)."
    )


def check_host_specs(specs: Sequence) -> None:
    """Raise ``ValueError`` if the hosts' datasets do not yield the same element specs."""
    for host, spec in enumerate(specs[1:], start=1):
        if spec != specs[0]:
            raise ValueError(
                f"distribute_datasets_from_function: host {host}'s dataset yields {spec} but "
                f"host 0's yields {specs[0]}; every replica runs the same program, so every "
                f"host must yield elements of the same structure, shapes and dtypes. Fix: "
                f"batch with context.get_per_replica_batch_size(global_batch_size) and "
                f"drop_remainder=True on every host, and read the same kind of data."
            )
