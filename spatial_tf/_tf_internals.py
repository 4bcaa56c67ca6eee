"""The one door to TensorFlow's private modules and attributes.

Everything spatial_tf needs from TensorFlow beyond its public API is reached here and
nowhere else, so a TensorFlow release that moves or renames one of them fails here, at
once, with a message naming the missing module or attribute and the TensorFlow version,
instead of somewhere downstream with a misleading error.

Checked on TensorFlow 2.16.2, 2.18.1, 2.20.0 and 2.21.0 (``VERIFIED_TF_VERSIONS``).

- ``xla_sharding``: the ``Sharding`` builder TPUStrategy's own logical-device methods use
  (``Sharding.tile / partial_tile / replicate / assign_device``, ``apply_to_tensor``).
- ``xla_data_pb2``, ``hlo_pb2``: XLA's ``OpSharding`` and ``HloModuleProto`` messages.
- the ``tf.distribute`` machinery the emulator builds its strategy from (the one-device
  extended object, replica context, per-replica values, input pipelines, the reduction
  of a non-distributed value) and ``gen_xla_ops.xla_replica_id``.
- the distributed variables ``TPUStrategy`` makes in its scope: ``distribute_utils``'s
  ``create_mirrored_variable`` with its TPU class mapping (``TPUMirroredVariable``,
  ``TPUSyncOnReadVariable``), ``TPUReplicatedVariable`` (one replica's variable on
  each logical core under XLA SPMD), the update helpers ``TPUExtended._update`` uses
  (``select_replica``, ``update_regroup``, ``assert_mirrored``, ``UpdateContext``).
- ``summary_ops_v2``: where ``tf.summary`` keeps the default writer, whose handle the
  emulator's summaries write to (``default_summary_writer_handle``).
- ``TPU_EXTENDED_ATTRIBUTES``: what ``TPUStrategy.extended`` keeps privately about its
  logical devices, read by ``tpu_attribute`` for strategies spatial_tf did not build.
- ``control_flow_util``: whether code is traced into a ``tf.function(jit_compile=True)``
  (``in_xla_compiled_function``), where the emulator's host-call step cannot go.

>>> sorted(MODULES)  # doctest: +NORMALIZE_WHITESPACE
['control_flow_util', 'cross_device_ops', 'distribute_lib', 'distribute_utils',
 'gen_xla_ops', 'hlo_pb2', 'input_lib', 'input_util', 'numpy_dataset',
 'one_device_strategy', 'summary_ops_v2', 'tpu_replicated_variable', 'values',
 'xla_data_pb2', 'xla_sharding']
>>> xla_data_pb2.OpSharding.Type.Name(xla_data_pb2.OpSharding.REPLICATED)
'REPLICATED'
"""
import dataclasses
import importlib
import weakref
from typing import Any, Callable, List

import tensorflow as tf

from spatial_tf.error import Error

__all__ = [
    "VERIFIED_TF_VERSIONS",
    "MODULES",
    "TPU_EXTENDED_ATTRIBUTES",
    "inbound_nodes",
    "TensorFlowInternalsError",
    "xla_sharding",
    "xla_data_pb2",
    "hlo_pb2",
    "distribute_lib",
    "one_device_strategy",
    "values",
    "distribute_utils",
    "tpu_replicated_variable",
    "numpy_dataset",
    "input_lib",
    "input_util",
    "cross_device_ops",
    "gen_xla_ops",
    "summary_ops_v2",
    "control_flow_util",
    "default_summary_writer_handle",
    "summary_recording_condition",
    "tpu_attribute",
    "function_graph",
    "in_xla_compiled_function",
    "handle_data",
    "child_layers",
    "callable_losses",
    "own_trainable_variables",
    "weight_regularization",
    "missing_internals",
    "TPULayout",
    "tpu_layout",
    "tpu_device_assignment",
    "record_tpu_layout",
    "tf_hook",
    "checked_hooks",
]

VERIFIED_TF_VERSIONS = ("2.16.2", "2.18.1", "2.20.0", "2.21.0")

# name here -> (module path, attributes spatial_tf uses from it)
MODULES = {
    "xla_sharding": (
        "tensorflow.python.compiler.xla.experimental.xla_sharding",
        ("Sharding.tile", "Sharding.partial_tile", "Sharding.replicate",
         "Sharding.assign_device", "Sharding.apply_to_tensor", "Sharding.proto"),
    ),
    "xla_data_pb2": ("tensorflow.compiler.xla.xla_data_pb2", ("OpSharding",)),
    "hlo_pb2": ("tensorflow.compiler.xla.service.hlo_pb2", ("HloModuleProto",)),
    # the emulator's tf.distribute strategy (spatial_tf/emulator/distribute/pieces.py)
    "distribute_lib": ("tensorflow.python.distribute.distribute_lib",
                       ("ReplicaContext", "ReplicaContext._merge_call", "UpdateContext")),
    "one_device_strategy": ("tensorflow.python.distribute.one_device_strategy",
                            ("OneDeviceExtended",)),
    "values": ("tensorflow.python.distribute.values", ("PerReplica", "DistributedVariable")),
    # the distributed variables TPUStrategy makes, made by TensorFlow's own code
    "distribute_utils": ("tensorflow.python.distribute.distribute_utils",
                         ("create_mirrored_variable", "TPU_VARIABLE_CLASS_MAPPING",
                          "TPU_VARIABLE_POLICY_MAPPING", "validate_colocate",
                          "select_replica", "update_regroup", "assert_mirrored",
                          "regroup")),
    "tpu_replicated_variable": ("tensorflow.python.distribute.tpu_replicated_variable",
                                ("TPUReplicatedVariable",
                                 "TPUReplicatedVariable._update")),
    "numpy_dataset": ("tensorflow.python.distribute.numpy_dataset", ("SingleDevice",)),
    "input_lib": ("tensorflow.python.distribute.input_lib", ("InputWorkers",)),
    "input_util": ("tensorflow.python.distribute.input_util",
                   ("get_distributed_dataset", "get_distributed_datasets_from_function")),
    "cross_device_ops": ("tensorflow.python.distribute.cross_device_ops",
                         ("reduce_non_distributed_value",)),
    "gen_xla_ops": ("tensorflow.compiler.tf2xla.ops.gen_xla_ops", ("xla_replica_id",)),
    # the default tf.summary writer, whose handle the emulator's host writes need
    "summary_ops_v2": ("tensorflow.python.ops.summary_ops_v2", ("_summary_state",)),
    # whether a tf.function(jit_compile=True) is being traced (no host call in it)
    "control_flow_util": ("tensorflow.python.ops.control_flow_util",
                          ("GraphOrParentsInXlaContext",)),
}

# TPUStrategy.extended (TPUExtended) attribute -> what it holds
TPU_EXTENDED_ATTRIBUTES = {
    "_tpu_devices": "array [replica, logical core] of TPU device names",
    "_use_spmd_for_xla_partitioning": "experimental_spmd_xla_partitioning as given",
    "_device_assignment": "the experimental_device_assignment given (or None)",
}


class TensorFlowInternalsError(Error, ImportError):
    """A TensorFlow internal spatial_tf relies on is missing from the installed TensorFlow."""


def _versions():
    return ", ".join(VERIFIED_TF_VERSIONS)


def _missing(what):
    return TensorFlowInternalsError(
        f"spatial_tf: {what} is missing from the installed TensorFlow {tf.__version__}; "
        f"spatial_tf was checked on TensorFlow {_versions()}. Expected it as in those "
        f"releases. Fix: install one of those TensorFlow versions (pip install "
        f"'spatial-tf[cpu]'), or report the TensorFlow version so support can be added."
    )


def tf_hook(method: Callable) -> Callable:
    """Mark ``method`` as overriding a protected hook of a TensorFlow base class
    (``checked_hooks`` verifies that the base still has it).

    >>> class Base:
    ...     def _hook(self): ...
    >>> @checked_hooks
    ... class Mine(Base):
    ...     @tf_hook
    ...     def _hook(self): ...
    >>> @checked_hooks
    ... class Renamed(Base):
    ...     @tf_hook
    ...     def _old_name(self): ...  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spatial_tf._tf_internals.TensorFlowInternalsError: spatial_tf: Base._old_name, a hook ...
    """
    setattr(method, "_spatial_tf_hook", True)
    return method


def checked_hooks(cls: type) -> type:
    """Class decorator: every ``tf_hook`` of ``cls`` exists in one of its base classes,
    else ``TensorFlowInternalsError`` at import, naming the hook and the TensorFlow
    versions spatial_tf was checked on (a renamed hook would otherwise never be called
    and the base class's behaviour would run silently)."""
    for name, attribute in vars(cls).items():
        method = attribute.fget if isinstance(attribute, property) else attribute
        if getattr(method, "_spatial_tf_hook", False) and \
                not any(name in vars(base) for base in cls.__mro__[1:]):
            raise _missing(f"{cls.__mro__[1].__name__}.{name}, a hook {cls.__name__} "
                           f"overrides,")
    return cls


def _load(name):
    path, attributes = MODULES[name]
    try:
        module = importlib.import_module(path)
    except ImportError as e:
        raise _missing(f"module {path}") from e
    for attribute in attributes:
        if not _has(module, attribute):
            raise _missing(f"{path}.{attribute}")
    return module


def _has(obj, dotted):
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


xla_sharding = _load("xla_sharding")
xla_data_pb2 = _load("xla_data_pb2")
hlo_pb2 = _load("hlo_pb2")
distribute_lib = _load("distribute_lib")
one_device_strategy = _load("one_device_strategy")
values = _load("values")
distribute_utils = _load("distribute_utils")
tpu_replicated_variable = _load("tpu_replicated_variable")
numpy_dataset = _load("numpy_dataset")
input_lib = _load("input_lib")
input_util = _load("input_util")
cross_device_ops = _load("cross_device_ops")
gen_xla_ops = _load("gen_xla_ops")
summary_ops_v2 = _load("summary_ops_v2")
control_flow_util = _load("control_flow_util")


def summary_recording_condition() -> Any:
    """What ``tf.summary.record_if`` set where this is called: a bool, a tensor, a
    callable, or None when no ``record_if`` is entered (TensorFlow keeps it in
    ``summary_ops_v2._summary_state.is_recording``; no public call returns it)."""
    return getattr(summary_ops_v2._summary_state, "is_recording", None)


def default_summary_writer_handle() -> Any:
    """The resource handle of the default ``tf.summary`` writer where this is called,
    or None when none is default. TensorFlow keeps the writer in ``summary_ops_v2``'s
    ``_summary_state`` and its handle in the writer's ``_resource``; no public call
    returns either."""
    writer = getattr(summary_ops_v2._summary_state, "writer", None)
    return getattr(writer, "_resource", None) if writer is not None else None


def in_xla_compiled_function() -> bool:
    """Whether the code calling this is being traced into a ``tf.function(jit_compile=
    True)``, or into a function called from one: all of it is then compiled by XLA.
    ``tf.function`` marks the graph it traces such a function from with an XLA control
    flow context, which TensorFlow reads with ``control_flow_util``; no public call
    tells.

    >>> in_xla_compiled_function()
    False
    >>> tf.function(jit_compile=True)(lambda: tf.constant(in_xla_compiled_function()))()
    <tf.Tensor: shape=(), dtype=bool, numpy=True>
    """
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def function_graph(graph: Any, name: str) -> Any:
    """The graph of the function ``name`` that ``graph`` calls (a nested ``tf.function``:
    a ``PartitionedCall`` op's ``f``), or None. TensorFlow keeps it in the outer graph's
    function library, reached only through ``Graph._get_function``."""
    get = getattr(graph, "_get_function", None)
    function = get(name) if get is not None else None
    return getattr(function, "graph", None)


def handle_data(handle: Any) -> Any:
    """The shape and dtype TensorFlow records on a resource handle (its ``_handle_data``:
    ``is_set``, ``shape_and_type``), or None for a tensor that has none."""
    return getattr(handle, "_handle_data", None)


# ------------------------------------------------------------ Keras and tf_keras layers

def child_layers(layer: Any) -> List[Any]:
    """The layers ``layer`` holds directly, in its attributes and lists included: Keras 3
    and tf_keras both track them in ``_flatten_layers``; a ``tf.Module`` that is no layer
    gives its ``layers``, if any."""
    flatten = getattr(layer, "_flatten_layers", None)
    if flatten is not None:
        return list(flatten(include_self=False, recursive=False))
    return list(getattr(layer, "layers", ()))


def callable_losses(layer: Any) -> List[Any]:
    """tf_keras' list of a layer's loss callables (``_callable_losses``: weight
    regularizers among them), the layer's own list, so that an item can be replaced;
    ``[]`` for a Keras 3 layer."""
    return getattr(layer, "_callable_losses", None) or []


def own_trainable_variables(layer: Any) -> List[Any]:
    """Keras 3's trainable variables a layer made itself (``_trainable_variables``, not
    its sublayers'); ``[]`` for a tf_keras layer."""
    return list(getattr(layer, "_trainable_variables", None) or [])


def weight_regularization(loss: Any) -> Any:
    """``(tag, regularization)`` for tf_keras' weight regularizer loss,
    ``partial(_tag_callable, partial(_loss_for_variable, variable))`` (``tag`` the
    outer function, None when there is none), else None (an ordered one included)."""
    tag = None
    if _is_partial_of(loss, "_tag_callable"):
        tag, loss = loss.func, loss.args[0]
    return (tag, loss) if _is_partial_of(loss, "_loss_for_variable") else None


def _is_partial_of(loss: Any, name: str) -> bool:
    """Whether ``loss`` is ``functools.partial(<function name>, one_argument)``."""
    return (getattr(getattr(loss, "func", None), "__name__", "") == name
            and len(getattr(loss, "args", ())) == 1)


def tpu_attribute(strategy: Any, name: str) -> Any:
    """``strategy.extended.<name>`` of a ``TPUStrategy``, or a loud error naming it.

    Only for the attributes listed in ``TPU_EXTENDED_ATTRIBUTES``.

    >>> tpu_attribute(tf.distribute.get_strategy(), "_tpu_devices")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spatial_tf._tf_internals.TensorFlowInternalsError: spatial_tf: TPUStrategy.extended._tpu_devices ...
    """
    if name not in TPU_EXTENDED_ATTRIBUTES:
        raise KeyError(
            f"tpu_attribute: {name!r} is not one of the TPUStrategy internals spatial_tf "
            f"reads ({', '.join(TPU_EXTENDED_ATTRIBUTES)}). Fix: add it to "
            f"TPU_EXTENDED_ATTRIBUTES with what it holds."
        )
    extended = getattr(strategy, "extended", None)
    if not hasattr(extended, name):
        raise _missing(
            f"TPUStrategy.extended.{name} ({TPU_EXTENDED_ATTRIBUTES[name]}; "
            f"{type(strategy).__name__} has none)"
        )
    return getattr(extended, name)


@dataclasses.dataclass(frozen=True)
class TPULayout:
    """What ``split`` needs to know of a ``TPUStrategy``: cores per replica, SPMD or not."""

    num_cores_per_replica: int
    spmd: bool
    device_assignment: Any = None


_LAYOUTS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()  # strategies tpu_strategy() built -> TPULayout


def record_tpu_layout(strategy: Any, layout: "TPULayout") -> None:
    """Remember what ``tpu_strategy`` knew when it built ``strategy``."""
    _LAYOUTS[strategy] = layout


def tpu_layout(strategy: Any) -> "TPULayout":
    """The ``TPULayout`` of a ``TPUStrategy``.

    Recorded when ``tpu_strategy`` built it; for a strategy built elsewhere, read from
    TensorFlow's ``TPUExtended``, failing loudly naming the attribute if a TensorFlow
    release renamed it.
    """
    recorded = _LAYOUTS.get(strategy) if _weakrefable(strategy) else None
    if recorded is not None:
        return recorded
    devices = tpu_attribute(strategy, "_tpu_devices")
    spmd = bool(tpu_attribute(strategy, "_use_spmd_for_xla_partitioning"))
    return TPULayout(int(devices.shape[1]), spmd)


def tpu_device_assignment(strategy: Any) -> Any:
    """The ``DeviceAssignment`` a ``TPUStrategy`` was built with, or None."""
    recorded = _LAYOUTS.get(strategy) if _weakrefable(strategy) else None
    if recorded is not None:
        return recorded.device_assignment
    return tpu_attribute(strategy, "_device_assignment")


def _weakrefable(obj):
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


def missing_internals(strategy: Any = None) -> List[str]:
    """Every internal not found: ``[]`` when all are there.

    With a ``TPUStrategy`` also checks its ``TPU_EXTENDED_ATTRIBUTES``.
    """
    missing = []
    for path, attributes in MODULES.values():
        try:
            module = importlib.import_module(path)
        except ImportError:
            missing.append(path)
            continue
        missing += [f"{path}.{a}" for a in attributes if not _has(module, a)]
    if strategy is not None:
        missing += [
            f"TPUStrategy.extended.{name}"
            for name in TPU_EXTENDED_ATTRIBUTES
            if not hasattr(strategy.extended, name)
        ]
    return missing


def inbound_nodes(layer: Any) -> List[Any]:
    """The nodes of a Keras layer: one per call in a functional model, each with its
    ``input_tensors`` (Keras keeps them in ``layer._inbound_nodes``; [] when never called)."""
    return list(getattr(layer, "_inbound_nodes", None) or ())
