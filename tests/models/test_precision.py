"""Mixed precision of the reference U-Net: bfloat16 compute, float32 variables and logits."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf._tf_internals import xla_data_pb2
from spatial_tf.models import unet3d
from spatial_tf.models.precision import default_dtype_policy, resolve_dtype_policy

TINY = dict(depth=2, base_filters=4, num_classes=3)


def test_every_layer_but_the_logits_computes_in_bfloat16():
    model = unet3d((8, 8, 8, 1), dtype_policy="mixed_bfloat16", **TINY)
    inner = [layer for layer in model.layers if layer.name not in ("image", "logits")]
    assert len(inner) == 20  # 3 blocks x 2 x (conv, bn, relu) + pool, transpose
    assert {layer.compute_dtype for layer in inner} == {"bfloat16"}
    assert {v.dtype for v in model.weights} == {"float32"}
    assert model.get_layer("logits").compute_dtype == "float32"
    assert model.get_layer("logits").dtype_policy.name == "float32"
    assert model.inputs[0].dtype == "float32"


def test_the_output_is_float32_and_close_to_the_float32_model():
    image = np.random.default_rng(0).normal(size=(1, 8, 8, 8, 1)).astype("float32")
    keras.utils.set_random_seed(0)
    mixed = unet3d((8, 8, 8, 1), dtype_policy="mixed_bfloat16", **TINY)
    keras.utils.set_random_seed(0)
    full = unet3d((8, 8, 8, 1), dtype_policy="float32", **TINY)
    y_mixed, y_full = mixed(image, training=True), full(image, training=True)
    assert y_mixed.dtype == tf.float32 and y_full.dtype == tf.float32
    difference = float(tf.reduce_max(tf.abs(y_mixed - y_full)))
    # bfloat16 keeps 8 bits of mantissa: close, but not equal
    assert 0 < difference < 0.1 * float(tf.reduce_max(tf.abs(y_full)))


def test_float32_by_default_off_a_tpu():
    model = unet3d((8, 8, 8, 1), **TINY)
    assert {layer.compute_dtype for layer in model.layers} == {"float32"}
    assert default_dtype_policy() == "float32"


def test_the_global_keras_policy_is_the_default_when_set():
    keras.config.set_dtype_policy("mixed_float16")
    try:
        assert default_dtype_policy() == "mixed_float16"
        assert unet3d((8, 8, 8, 1), **TINY).get_layer("down0_conv1").compute_dtype == "float16"
    finally:
        keras.config.set_dtype_policy("float32")


def test_mixed_bfloat16_under_a_tpu_strategy(monkeypatch):
    # only the TPU is faked: a TPUStrategy object without a TPU behind it
    fake_tpu = object.__new__(tf.distribute.TPUStrategy)
    monkeypatch.setattr(tf.distribute, "has_strategy", lambda: True)
    monkeypatch.setattr(tf.distribute, "get_strategy", lambda: fake_tpu)
    assert default_dtype_policy() == "mixed_bfloat16"
    assert resolve_dtype_policy(None, "unet").name == "mixed_bfloat16"


@pytest.mark.parametrize("value", ["int32", "bfloat17", 3])
def test_bad_policies(value):
    with pytest.raises(ValueError, match=rf"unet: dtype_policy is {value!r}; expected a "
                                         r"floating Keras dtype policy such as 'float32'"):
        unet3d((8, 8, 8, 1), dtype_policy=value, **TINY)


def test_a_policy_object_is_taken_as_it_is():
    policy = keras.DTypePolicy("mixed_bfloat16")
    assert resolve_dtype_policy(policy, "unet") is policy


@pytest.mark.emulator
def test_a_partitioned_train_step_computes_in_bfloat16_on_the_emulator():
    strategy = spatial_tf.Emulator(num_cores_per_replica=2)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = unet3d((8, 8, 8, 1), dtype_policy="mixed_bfloat16", **TINY)
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    image = tf.constant(rng.normal(size=(1, 8, 8, 8, 1)), tf.float32)
    labels = tf.constant(rng.integers(0, 3, size=(1, 8, 8, 8)), tf.int32)
    spec = [[1, 2, 1, 1, 1], [1, 2, 1, 1]]

    def step(image, labels):
        image, labels = spatial_tf.split((image, labels), spec)
        with tf.GradientTape() as tape:
            logits = model(image, training=True)
            loss = spatial_tf.losses.sparse_categorical_crossentropy(labels, logits,
                                                                     from_logits=True)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, logits

    before = [v.numpy() for v in model.trainable_variables]
    hlo = strategy.compile(step, args=(image, labels)).traced.module
    convolutions = [i for c in hlo.computations for i in c.instructions
                    if i.opcode == "convolution"]
    bf16 = sum(i.shape.element_type == xla_data_pb2.BF16 for i in convolutions)
    f32 = sum(i.shape.element_type == xla_data_pb2.F32 for i in convolutions)
    # forward, input- and weight-gradient convolutions of the 6 bfloat16 3x3 convs in
    # bfloat16; the float32 logits conv (1x1) and its gradients in float32
    assert bf16 >= 3 * 6 and f32 >= 2, (bf16, f32)
    loss, logits = strategy.run(step, args=(image, labels))
    assert logits.dtype == tf.float32 and np.isfinite(float(loss))
    assert 0.5 < float(loss) < 2.0  # about log(3) at initialization
    after = [v.numpy() for v in model.trainable_variables]
    assert all(a.dtype == np.float32 for a in after)
    assert sum(not np.array_equal(a, b) for a, b in zip(after, before)) == len(before)
