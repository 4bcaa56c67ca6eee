"""spatial_tf.layer_kinds: the one table partition_friendly, the report's remedies and the
frame filter read; a kind known to one of them and not the table fails here."""
import importlib
import inspect

import keras
import pytest
import tensorflow as tf

from spatial_tf import frames, partition_friendly
from spatial_tf.layer_kinds import CHANGES, KINDS, REMEDIES, LayerKind, kind_of, remedy_for_op

# Keras 3 layers with a window over the split axes, or a batch statistic, that
# partition_friendly leaves alone, each for its reason
LEFT_ALONE = {
    "Conv1D", "Conv1DTranspose",  # 1D: a sequence, not an image, split rarely
    "ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D",  # recurrent over time, windows per step
    "LayerNormalization", "GroupNormalization", "UnitNormalization", "RMSNormalization",
    "SpectralNormalization", "Normalization",  # per example, a weight's, or fixed (adapt)
}


def test_the_table_is_well_formed():
    names = [kind.name for kind in KINDS]
    assert len(set(names)) == len(names)
    assert {kind.change for kind in KINDS} <= set(CHANGES)
    assert {kind.remedy for kind in KINDS} - {None} <= set(REMEDIES)
    assert all(isinstance(kind, LayerKind) and kind.classes for kind in KINDS)


def test_kinds_sharing_an_op_type_give_it_one_remedy():
    for op_type in {t for kind in KINDS for t in kind.op_types}:
        assert len({k.remedy for k in KINDS if op_type in k.op_types}) == 1, op_type


def test_every_op_type_is_tensorflows():
    for kind in KINDS:
        for op_type in kind.op_types:
            assert hasattr(tf.raw_ops, op_type), (kind.name, op_type)


def _keras_layer_classes():
    return [cls for _, cls in inspect.getmembers(keras.layers, inspect.isclass)
            if issubclass(cls, keras.layers.Layer)]


def test_every_keras_convolution_and_normalization_is_a_kind_or_left_alone_on_purpose():
    """A Keras class with a window (Conv) or batch statistics (Normalization) in its name
    is in the table, so partition_friendly and the report both know it, or listed above."""
    for cls in _keras_layer_classes():
        name = cls.__name__
        if ("Conv" in name or "Normalization" in name) and name not in LEFT_ALONE:
            assert kind_of(cls) is not None, f"{name}: add it to spatial_tf/layer_kinds.py"


def test_partition_friendly_has_a_rule_for_each_change_and_reads_the_table():
    assert set(partition_friendly._RULES) == set(CHANGES)
    for cls in _keras_layer_classes():
        kind = kind_of(cls)
        expected = None if kind is None else partition_friendly._RULES[kind.change]
        # _rule_for looks at the layer's class only
        assert partition_friendly._rule_for(cls.__new__(cls)) is expected, cls.__name__
    for kind in KINDS:
        if kind.change != "none":
            assert partition_friendly._RULES[kind.change] is not None, kind.name


def test_tf_keras_classes_are_the_same_kinds():
    tf_keras = pytest.importorskip("tf_keras")
    for name in ("Conv2D", "Conv3D", "DepthwiseConv2D", "Conv2DTranspose", "SeparableConv2D",
                 "BatchNormalization"):
        assert kind_of(getattr(tf_keras.layers, name)) is kind_of(getattr(keras.layers, name))


def test_every_module_that_builds_a_kinds_ops_declares_its_frames():
    modules = {m for kind in KINDS for m in kind.modules}
    assert {"spatial_tf.halo_conv", "spatial_tf.update_order",
            "spatial_tf.partition_friendly"} <= modules
    for name in modules:
        module = importlib.import_module(name)
        assert frames.is_excluded(module.__file__), f"{name} does not register_exclusion"


def test_remedies_give_each_kinds_op_its_remedy():
    """Every op type the report's remedies tell apart (a raw op of TensorFlow's with
    Conv or BatchNorm in its name that gets more than the general advice) is in the table,
    and each table op gets its kind's remedy."""
    remedies = _remedies_module()

    class Op:
        def __init__(self, op_type):
            self.type, self.name = op_type, f"gradient_tape/model/{op_type}"

        def get_attr(self, name):
            return [1, 1, 1, 1]

    class Source:
        def __init__(self, op_type):
            self.op = Op(op_type)

    texts = {"fused batch norm": remedies.FUSED_BATCH_NORM}
    for op_type in [n for n in dir(tf.raw_ops) if "Conv" in n or "BatchNorm" in n]:
        said = remedies.explain("all-gather", Source(op_type), 4)
        remedy = remedy_for_op(op_type)
        if remedy is None:
            assert said == remedies.GENERIC["all-gather"], op_type
        else:
            assert said != remedies.GENERIC["all-gather"], op_type
            if remedy in texts:
                assert said == texts[remedy], op_type


def _remedies_module():
    for name in ("spatial_tf.emulator.diagnose.remedies", "spatial_tf.emulator.remedies"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    pytest.skip("the emulator's remedies module is not importable")

