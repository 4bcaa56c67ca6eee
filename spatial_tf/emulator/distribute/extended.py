"""``EmulatorExtended``: what ``Emulator.extended`` answers, as TPUStrategy's would.

It is TensorFlow's one-device implementation (everything lives on the host CPU, where
the emulator reads and writes it) with the replica count, input pipelines, reductions,
per-replica values and distributed variables of a strategy with ``num_replicas``
replicas (variables: ``variables.py``, their updates: ``updates.py``), and
``call_for_each_replica`` calling the function once in replica 0's context, as
TPUStrategy's does (``Emulator.run`` runs the step emulated on every replica).
"""
import tensorflow as tf

from spatial_tf import logs
from spatial_tf.emulator.distribute import (datasets, hosts, pieces, replica, updates,
                                            variables)

__all__ = ["EmulatorExtended", "quiet_iterators"]


@pieces.checked_hooks
class EmulatorExtended(pieces.OneDeviceExtended):
    """The ``extended`` object of an ``Emulator`` with ``num_replicas`` replicas."""

    def __init__(self, container_strategy, host_layout):
        super().__init__(container_strategy, "/cpu:0")
        self._host_layout = host_layout
        self._num_replicas = len(host_layout.pipeline_of_replica)
        self._num_hosts = host_layout.num_hosts
        self._cluster_resolver = None

    # ------------------------------------------------------------ replicas

    @pieces.tf_hook
    def _create_variable(self, next_creator, **kwargs):
        colocate_with = kwargs.pop("colocate_with", None)
        if isinstance(colocate_with, pieces.SingleDevice):  # as TPUStrategy: not distributed
            with tf.device(colocate_with.device):
                return next_creator(**kwargs)
        # colocated with a variable of this scope: the same copies, so nothing to do
        strategy = self._container_strategy()
        variable = variables.create(strategy, next_creator, strategy.num_cores_per_replica,
                                    self._device, kwargs)
        updates.checked_assigns(variable)
        strategy.replica_copies.add(variable)
        return variable

    @pieces.tf_hook
    def _update(self, var, fn, args, kwargs, group):
        return updates.update(self, self._local_results, var, fn, args, kwargs, group)

    @pieces.tf_hook
    def _update_non_slot(self, colocate_with, fn, args, kwargs, group):
        return updates.update_non_slot(self._local_results, self._device, fn, args, kwargs,
                                       group)

    @pieces.tf_hook
    def _broadcast_to(self, tensor, destinations):
        return updates.broadcast_to(tensor, self._num_replicas)

    @pieces.tf_hook
    def read_var(self, replica_local_var):
        return replica_local_var.read_value()

    @pieces.tf_hook
    def _get_local_replica_id(self, replica_id_in_sync_group):
        # in a step, XLA's replica id (a tensor); the program is that replica's and holds
        # its copy of each distributed variable as copy 0 (variables.py)
        if tf.is_tensor(replica_id_in_sync_group):
            return 0
        return replica_id_in_sync_group

    @property
    @pieces.tf_hook
    def _num_replicas_in_sync(self):
        return self._num_replicas

    @property
    @pieces.tf_hook
    def worker_devices(self):
        return (self._device,) * self._num_replicas

    @property
    @pieces.tf_hook
    def _support_per_replica_values(self):
        return self._num_replicas > 1

    @pieces.tf_hook
    def _call_for_each_replica(self, fn, args, kwargs):
        # as TPUExtended: ``fn`` called once, now, in replica 0's context (so variables
        # it creates are the scope's distributed variables); ``Emulator.run`` compiles
        # a step for every replica
        with replica.EmulatedReplicaContext(self._container_strategy(), replica_id=0):
            return fn(*(args or ()), **(kwargs or {}))

    @pieces.tf_hook
    def _local_results(self, value):
        if isinstance(value, tf.distribute.DistributedValues):
            return value.values
        if tf.nest.is_nested(value):  # each replica's structure (StrategyExtendedV2's)
            return tuple(tf.nest.map_structure(lambda x, r=r: _component(x, r), value)
                         for r in range(self._num_replicas))
        return (value,)

    @pieces.tf_hook
    def _reduce_to(self, reduce_op, value, destinations, options):
        if replica.in_program():
            if isinstance(value, pieces.DistributedVariable):  # this replica's copy
                value = variables.host_copies(value)[0].read_value()
            return replica.all_reduce(reduce_op, value, self._num_replicas)
        if isinstance(value, tf.distribute.DistributedValues):
            total = tf.add_n([tf.convert_to_tensor(v) for v in value.values])
            if reduce_op == tf.distribute.ReduceOp.MEAN:
                total = total / tf.cast(len(value.values), total.dtype)
            return total
        return pieces.reduce_non_distributed_value(
            reduce_op, value, destinations, self._num_replicas
        )

    @pieces.tf_hook
    def _gather_to_implementation(self, value, destinations, axis, options):
        if isinstance(value, tf.distribute.DistributedValues):
            return tf.concat([tf.convert_to_tensor(v) for v in value.values], axis=axis)
        return value

    @pieces.tf_hook
    def _experimental_distribute_values_from_function(self, value_fn):
        results = [
            value_fn(tf.distribute.experimental.ValueContext(r, self._num_replicas))
            for r in range(self._num_replicas)
        ]
        # a PerReplica even of one replica's value (TPUExtended: always_wrap=True)
        return pieces.regroup(results, always_wrap=True)

    # ------------------------------------------------------------ input

    @pieces.tf_hook
    def _input_workers_with_options(self, options=None):
        # one input worker per emulated host, feeding its replicas in order (TPUStrategy
        # builds one per TPU host from its device assignment); all run on this host's CPU
        return pieces.InputWorkers(
            [(self._input_device, (self._device,) * n)
             for n in self._host_layout.replicas_per_pipeline])

    @pieces.tf_hook
    def _experimental_distribute_dataset(self, dataset, options):
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(
                f"experimental_distribute_dataset: dataset is {type(dataset).__name__}; "
                f"expected a tf.data.Dataset yielding global batches."
            )
        datasets.check_global_batch(dataset.element_spec, self._num_replicas)
        return quiet_iterators(pieces.get_distributed_dataset(
            dataset, self._input_workers_with_options(options), self._container_strategy(),
            num_replicas_in_sync=self._num_replicas, options=options,
        ))

    @pieces.tf_hook
    def _distribute_datasets_from_function(self, dataset_fn, options):
        contexts = [
            tf.distribute.InputContext(num_input_pipelines=self._num_hosts, input_pipeline_id=h,
                                       num_replicas_in_sync=self._num_replicas)
            for h in range(self._num_hosts)
        ]

        specs = []

        def checked_dataset_fn(input_context):
            dataset = dataset_fn(input_context)
            if not isinstance(dataset, tf.data.Dataset):
                raise TypeError(
                    f"distribute_datasets_from_function: dataset_fn returned "
                    f"{type(dataset).__name__}; expected a tf.data.Dataset of per-replica "
                    f"batches (input_context.get_per_replica_batch_size(global_batch))."
                )
            specs.append(dataset.element_spec)
            hosts.check_host_specs(specs)  # before any step runs
            return dataset

        return quiet_iterators(pieces.get_distributed_datasets_from_function(
            checked_dataset_fn, self._input_workers_with_options(options), contexts,
            self._container_strategy(), options=options,
        ))


def _component(value, replica):
    """Replica ``replica``'s component of a distributed ``value``; else ``value``."""
    if isinstance(value, tf.distribute.DistributedValues):
        return value.values[replica]
    return value


def quiet_iterators(distributed):
    """``distributed`` (TensorFlow's distributed dataset), its ``iter()`` run in
    ``logs.quiet()``: the multi-device iterator it starts logs tf.data lines ("Memory
    patch applied", "will not be optimized") that no user can act on."""
    distributed.__class__ = _quiet_class(type(distributed))
    return distributed


_QUIET_CLASSES: dict = {}  # TensorFlow's distributed dataset class -> its quiet subclass


def _quiet_class(cls):
    """``cls`` with ``__iter__`` inside ``logs.quiet()``; same name, still a ``cls``."""
    if cls in _QUIET_CLASSES.values():  # already quiet
        return cls
    if cls not in _QUIET_CLASSES:
        def __iter__(self):
            with logs.quiet():
                return cls.__iter__(self)

        _QUIET_CLASSES[cls] = type(cls.__name__, (cls,), {
            "__iter__": __iter__, "__module__": cls.__module__,
            "__qualname__": cls.__qualname__})
    return _QUIET_CLASSES[cls]
