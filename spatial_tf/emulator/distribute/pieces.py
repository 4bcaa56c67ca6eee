"""The ``tf.distribute`` pieces the emulator builds its strategy from, by role.

``tf.distribute.Strategy`` is public, but a strategy of one's own needs TensorFlow's
extended object, replica context, per-replica values and input pipelines, which it keeps
in private modules; they come through ``spatial_tf._tf_internals`` (the one door to
TensorFlow's internals) and are named here for the emulator.
"""
from spatial_tf import _tf_internals as _tf

__all__ = [
    "OneDeviceExtended", "ReplicaContext", "PerReplica", "InputWorkers",
    "get_distributed_dataset", "get_distributed_datasets_from_function",
    "reduce_non_distributed_value", "xla_replica_id", "tf_hook", "checked_hooks",
    "DistributedVariable", "TPUReplicatedVariable", "SingleDevice", "UpdateContext",
    "create_mirrored_variable", "TPU_VARIABLE_CLASS_MAPPING", "TPU_VARIABLE_POLICY_MAPPING",
    "validate_colocate", "select_replica", "update_regroup", "assert_mirrored", "regroup",
    "in_xla_compiled_function",
]

OneDeviceExtended = _tf.one_device_strategy.OneDeviceExtended
ReplicaContext = _tf.distribute_lib.ReplicaContext
PerReplica = _tf.values.PerReplica
InputWorkers = _tf.input_lib.InputWorkers
get_distributed_dataset = _tf.input_util.get_distributed_dataset
get_distributed_datasets_from_function = _tf.input_util.get_distributed_datasets_from_function
reduce_non_distributed_value = _tf.cross_device_ops.reduce_non_distributed_value
xla_replica_id = _tf.gen_xla_ops.xla_replica_id
# the distributed variables TPUStrategy makes, and how its extended object updates them
DistributedVariable = _tf.values.DistributedVariable
TPUReplicatedVariable = _tf.tpu_replicated_variable.TPUReplicatedVariable
SingleDevice = _tf.numpy_dataset.SingleDevice
UpdateContext = _tf.distribute_lib.UpdateContext
create_mirrored_variable = _tf.distribute_utils.create_mirrored_variable
TPU_VARIABLE_CLASS_MAPPING = _tf.distribute_utils.TPU_VARIABLE_CLASS_MAPPING
TPU_VARIABLE_POLICY_MAPPING = _tf.distribute_utils.TPU_VARIABLE_POLICY_MAPPING
validate_colocate = _tf.distribute_utils.validate_colocate
select_replica = _tf.distribute_utils.select_replica
update_regroup = _tf.distribute_utils.update_regroup
assert_mirrored = _tf.distribute_utils.assert_mirrored
# per-replica values from each replica's value, as TPUStrategy's extended object makes them
regroup = _tf.distribute_utils.regroup
# whether a tf.function(jit_compile=True) is being traced, where no host call may go
in_xla_compiled_function = _tf.in_xla_compiled_function
# marking and checking the protected TensorFlow hooks the emulator's classes override
tf_hook = _tf.tf_hook
checked_hooks = _tf.checked_hooks
