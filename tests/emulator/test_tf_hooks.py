"""The protected TensorFlow hooks the emulator overrides are marked, hence checked at import."""
import pytest

from spatial_tf import _tf_internals
from spatial_tf.emulator.distribute.extended import EmulatorExtended
from spatial_tf.emulator.distribute.replica import EmulatedReplicaContext

EXTENDED_HOOKS = [
    "_create_variable", "_num_replicas_in_sync", "worker_devices", "_support_per_replica_values",
    "_call_for_each_replica", "_local_results", "_reduce_to", "_gather_to_implementation",
    "_experimental_distribute_values_from_function", "_input_workers_with_options",
    "_experimental_distribute_dataset", "_distribute_datasets_from_function",
    "_update", "_update_non_slot", "_broadcast_to", "read_var", "_get_local_replica_id",
]


def _marked(cls):
    out = []
    for name, attribute in vars(cls).items():
        method = attribute.fget if isinstance(attribute, property) else attribute
        if getattr(method, "_spatial_tf_hook", False):
            out.append(name)
    return sorted(out)


def test_every_override_of_tensorflow_is_marked_as_a_hook():
    assert _marked(EmulatorExtended) == sorted(EXTENDED_HOOKS)
    assert _marked(EmulatedReplicaContext) == ["_merge_call", "devices"]


def test_a_hook_tensorflow_no_longer_has_fails_at_class_creation_naming_it():
    with pytest.raises(_tf_internals.TensorFlowInternalsError,
                       match=r"OneDeviceExtended\._renamed_hook, a hook Broken overrides, is "
                             r"missing from the installed TensorFlow .*checked on TensorFlow "
                             r"2\.16\.2, 2\.18\.1, 2\.20\.0, 2\.21\.0"):
        @_tf_internals.checked_hooks
        class Broken(EmulatorExtended.__mro__[1]):
            @_tf_internals.tf_hook
            def _renamed_hook(self):
                return None
