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

>>> import numpy as np
>>> same = [[np.arange(2)], [np.arange(2) + 2], [np.arange(2)], [np.arange(2) + 2]]
>>> identical_hosts(same, [0], num_hosts=2)
True
"""
from typing import List, Sequence

import numpy as np
import tensorflow as tf

__all__ = ["IdenticalHostInputWarning", "distributed_indices", "identical_hosts",
           "identical_hosts_message", "check_host_specs"]


class IdenticalHostInputWarning(UserWarning):
    """Every host fed its replicas the same batches: the input is not sharded by host."""


def distributed_indices(args, kwargs) -> List[int]:
    """Positions, among a call's tensor arguments, of those given as per-replica values
    (from a distributed dataset); the others are passed whole to every replica."""
    indices, position = [], 0
    for leaf in tf.nest.flatten((tuple(args), dict(kwargs or {}))):
        if isinstance(leaf, tf.distribute.DistributedValues):
            indices.append(position)
            position += 1
        elif tf.is_tensor(leaf) or isinstance(leaf, np.ndarray):
            position += 1
    return indices


def identical_hosts(per_replica_args: Sequence[Sequence], indices: Sequence[int],
                    num_hosts: int) -> bool:
    """Whether every host's replicas got exactly host 0's replicas' per-replica inputs."""
    per_host = len(per_replica_args) // num_hosts
    if num_hosts < 2 or not indices:
        return False

    def host(h):
        return [np.asarray(per_replica_args[h * per_host + r][i])
                for r in range(per_host) for i in indices]

    first = host(0)
    return all(all(np.array_equal(a, b) for a, b in zip(first, host(h)))
               for h in range(1, num_hosts))


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
