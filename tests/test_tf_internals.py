"""The TensorFlow internals spatial_tf relies on exist in the installed TensorFlow."""
import pytest
import tensorflow as tf

from spatial_tf import _tf_internals
from spatial_tf._tf_internals import (
    TPU_EXTENDED_ATTRIBUTES,
    TPULayout,
    TensorFlowInternalsError,
    missing_internals,
    tpu_attribute,
    tpu_layout,
)


def _real_tpu_strategy():
    """TensorFlow's own TPUStrategy over a synthetic v3-8's devices (no TPU needed)."""
    from test_strategy import real_tpu_strategy

    return real_tpu_strategy("v3-8", 4)


def test_every_internal_exists_in_the_installed_tensorflow():
    strategy = _real_tpu_strategy()
    assert missing_internals(strategy) == []
    assert set(TPU_EXTENDED_ATTRIBUTES) == {
        "_tpu_devices", "_use_spmd_for_xla_partitioning", "_device_assignment"}
    # what they hold is what spatial_tf reads them for
    assert tpu_layout(strategy) == TPULayout(4, True)
    assert tpu_attribute(strategy, "_device_assignment").num_cores_per_replica == 4


def test_a_missing_module_names_itself_and_the_tensorflow_version(monkeypatch):
    moved = "tensorflow.compiler.xla.service.hlo_pb2_moved"  # as if a release moved it
    monkeypatch.setitem(_tf_internals.MODULES, "hlo_pb2", (moved, ("HloModuleProto",)))
    with pytest.raises(TensorFlowInternalsError) as e:
        _tf_internals._load("hlo_pb2")
    assert str(e.value).startswith(
        f"spatial_tf: module {moved} is missing from the installed TensorFlow "
        f"{tf.__version__}; spatial_tf was checked on TensorFlow 2.16.2, 2.18.1, 2.20.0, "
        f"2.21.0. Expected it as in those releases. Fix: install one of those")
    assert missing_internals() == [moved]


def test_a_renamed_tpu_attribute_fails_loudly_instead_of_defaulting():
    class Extended:  # what a TensorFlow that renamed _tpu_devices would hand back
        _use_spmd_for_xla_partitioning = True

    class Strategy:
        extended = Extended()

    with pytest.raises(TensorFlowInternalsError,
                       match=r"^spatial_tf: TPUStrategy\.extended\._tpu_devices \(array "
                             r"\[replica, logical core\] of TPU device names; Strategy has "
                             rf"none\) is missing from the installed TensorFlow {tf.__version__}"):
        tpu_layout(Strategy())
    assert missing_internals(Strategy()) == ["TPUStrategy.extended._tpu_devices",
                                             "TPUStrategy.extended._device_assignment"]


def test_a_missing_attribute_of_a_module_is_named(monkeypatch):
    monkeypatch.setitem(_tf_internals.MODULES, "hlo_pb2",
                        ("tensorflow.compiler.xla.service.hlo_pb2", ("HloModuleProtoRenamed",)))
    with pytest.raises(TensorFlowInternalsError,
                       match=r"tensorflow\.compiler\.xla\.service\.hlo_pb2\.HloModuleProtoRenamed "
                             r"is missing"):
        _tf_internals._load("hlo_pb2")
    assert missing_internals() == [
        "tensorflow.compiler.xla.service.hlo_pb2.HloModuleProtoRenamed"]


def test_only_listed_attributes_are_read():
    with pytest.raises(KeyError, match=r"'_tpu_cluster' is not one of the TPUStrategy internals"):
        tpu_attribute(tf.distribute.get_strategy(), "_tpu_cluster")


def test_no_other_module_imports_tensorflow_internals():
    import pathlib
    import re

    package = pathlib.Path(_tf_internals.__file__).parent
    private = re.compile(r"^\s*(from|import)\s+tensorflow\.(python|compiler|core)\b", re.M)
    offenders = [
        str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
        if p.name != "_tf_internals.py" and private.search(p.read_text())
    ]
    assert offenders == []
    assert len(list(package.rglob("*.py"))) > 20  # the walk saw the package


def test_handle_data_is_the_shape_and_dtype_a_variable_handle_records():
    data = _tf_internals.handle_data(tf.Variable(tf.zeros([2, 3], tf.float64)).handle)
    assert data.is_set
    assert [d.size for d in data.shape_and_type[0].shape.dim] == [2, 3]
    assert tf.as_dtype(data.shape_and_type[0].dtype) == tf.float64
    assert _tf_internals.handle_data(tf.constant(1.0)) is None
