"""The (2+1)D video classifier: shapes, layers, parameters, the split, float64 parity of
a split train step on the emulator, and argument checks."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.models import video_classifier


@pytest.mark.parametrize("input_shape,filters,classes", [
    ((8, 32, 32, 1), (8, 16), 4), ((3, 20, 12, 3), (4,), 2), ((16, 64, 64, 3), (16, 32, 64), 5)])
def test_logits_per_clip_and_parameters_of_each_stage(input_shape, filters, classes):
    model = video_classifier(input_shape, filters=filters, classes=classes)
    logits = model(np.zeros((2,) + input_shape, np.float32))
    assert tuple(logits.shape) == (2, classes)
    expected, channels = 0, input_shape[-1]
    for f in filters:   # 1x3x3 conv, batch norm (4 per channel), 3x1x1 conv, batch norm
        expected += 9 * channels * f + 4 * f + 3 * f * f + 4 * f
        channels = f
    assert model.count_params() == expected + channels * classes + classes


def test_space_then_time_kernels_and_pooling_in_space_only():
    model = video_classifier((6, 16, 16, 1), filters=(4, 8))
    kernels = {layer.name: layer.kernel_size for layer in model.layers
               if isinstance(layer, keras.layers.Conv3D)}
    assert kernels == {"stage1_space_conv": (1, 3, 3), "stage1_time_conv": (3, 1, 1),
                       "stage2_space_conv": (1, 3, 3), "stage2_time_conv": (3, 1, 1)}
    assert model.get_layer("stage1_pool").output.shape[1:4] == (6, 8, 8)
    assert model.get_layer("stage2_pool").output.shape[1:4] == (6, 4, 4)


def test_a_spec_adds_a_split_layer_and_none_adds_none():
    split = video_classifier((8, 16, 16, 1), spec=[1, 2, 2, 1, 1], filters=(4,))
    assert isinstance(split.get_layer("split"), spatial_tf.layers.Split)
    assert split.get_layer("split").spec == [1, 2, 2, 1, 1]
    plain = video_classifier((8, 16, 16, 1), filters=(4,))
    assert not any(isinstance(layer, spatial_tf.layers.Split) for layer in plain.layers)


def test_norm_momentum_reaches_every_batch_norm():
    model = video_classifier((4, 8, 8, 1), filters=(4, 4), norm_momentum=0.9)
    momenta = [layer.momentum for layer in model.layers
               if isinstance(layer, keras.layers.BatchNormalization)]
    assert momenta == [0.9] * 4


def test_mixed_bfloat16_computes_in_bfloat16_with_float32_logits_and_weights():
    model = video_classifier((4, 8, 8, 1), filters=(4,), dtype_policy="mixed_bfloat16")
    assert model.get_layer("stage1_time_conv").compute_dtype == "bfloat16"
    assert model.get_layer("logits").compute_dtype == "float32"
    assert all(w.dtype == "float32" for w in model.weights)
    assert model(np.zeros((1, 4, 8, 8, 1), np.float32)).dtype == "float32"


@pytest.mark.emulator
@pytest.mark.parametrize("spec", [[1, 1, 2, 2, 1], [1, 4, 1, 1, 1]])
def test_split_train_step_equals_the_unsplit_one_in_float64(spec):
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    try:
        strategy = spatial_tf.Emulator(num_cores_per_replica=4)
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model = video_classifier((8, 8, 8, 1), spec=spec, filters=(4,))
            spatial_tf.layers.partition_friendly(model, warn=False)
            optimizer = keras.optimizers.SGD(0.1)
            optimizer.build(model.trainable_variables)

        def step(clips, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(spatial_tf.losses.sparse_categorical_crossentropy(
                    labels, model(clips, training=True), from_logits=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        clips, labels = spatial_tf.data.moving_squares(2, frames=8, size=8)
        result = strategy.compare(step, args=(clips.astype("float64"), labels))
    finally:
        keras.config.set_floatx("float32")
        keras.config.set_dtype_policy("float32")
    assert result.ok, result.verdict
    # the loss and the update of every weight, batch-norm statistic and optimizer variable
    assert len(result.rows) >= 1 + len(model.variables)
    assert max(row.max_rel for row in result.rows) < 1e-10


@pytest.mark.parametrize("kwargs,error,words", [
    ({"input_shape": (32, 32, 1)}, ValueError, "input_shape is (32, 32, 1); expected 4"),
    ({"input_shape": (8, 32, 32.0, 1)}, ValueError, "expected 4 positive sizes"),
    ({"input_shape": 8}, ValueError, "input_shape is 8;"),
    ({"input_shape": (8, 32, 32, 1), "filters": ()}, ValueError, "filters is (); expected"),
    ({"input_shape": (8, 32, 32, 1), "filters": (8, 0)}, ValueError, "filters is (8, 0)"),
    ({"input_shape": (8, 4, 16, 1), "filters": (4, 4, 4)}, ValueError,
     "4 x 16 leave 1 x 4 pixels for the last of 3 stages"),
    ({"input_shape": (8, 7, 16, 1), "filters": (4, 4, 4)}, ValueError,
     "clips of at least 8 x 8 pixels, or fewer stages, e.g. filters=(4, 4)."),
    ({"input_shape": (8, 1, 16, 1), "filters": (4,)}, ValueError,
     "leave 1 x 16 pixels for the last of 1 stage (each pools 2x2); expected at least 2 x 2 "
     "there. Fix: clips of at least 2 x 2 pixels."),
    ({"input_shape": (8, 32, 32, 1), "classes": 0}, ValueError, "classes is 0"),
    ({"input_shape": (8, 32, 32, 1), "norm_momentum": 1.0}, ValueError, "norm_momentum is 1.0"),
    ({"input_shape": (8, 32, 32, 1), "dtype_policy": "int32"}, ValueError,
     "dtype_policy is 'int32'"),
])
def test_bad_arguments_are_named_with_a_fix(kwargs, error, words):
    with pytest.raises(error, match="^video_classifier: ") as e:
        video_classifier(**kwargs)
    assert words in str(e.value) and "Fix: " in str(e.value)
