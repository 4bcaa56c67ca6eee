"""The emulator compiles as a TPU schedules: one instruction stream kept low in memory,
and gradients all-reduced as they are produced (``_xla.TPU_LIKE_OPTIONS``)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.xla import _xla

FILTERS = (16, 32, 32, 16)  # four 3x3 convolutions, then a 1x1 head: five kernels


@pytest.fixture(scope="module")
def step_and_image():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 32, 4))
    x = inputs
    for filters in FILTERS:
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Conv2D(2, 1)(x))
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)

    def step(image):
        image = spatial_tf.split(image, [1, 2, 1, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(image) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    image = tf.constant(np.random.default_rng(0).normal(size=(2, 32, 32, 4)), tf.float32)
    return step, image


def _compiled(step_and_image, options):
    step, image = step_and_image
    return spatial_tf.Emulator(2, compiler_options=options).compile(step, args=(image,))


def _all_reduces(compiled):
    """(all-reduce count, how many of them reduce a tuple of several arrays)."""
    lines = [line for line in compiled.hlo_text().splitlines() if " all-reduce(" in line]
    tuples = [line for line in lines if "= (" in line.split(" all-reduce(")[0]]
    return len(lines), len(tuples)


def test_the_options_name_what_they_change():
    assert _xla.TPU_LIKE_OPTIONS == {
        "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
        "xla_disable_hlo_passes": "cpu-all-reduce-combiner",
    }


def test_each_kernel_gradient_is_all_reduced_on_its_own(step_and_image):
    count, tuples = _all_reduces(_compiled(step_and_image, None))
    assert tuples == 0
    assert count >= len(FILTERS) + 1  # at least one per kernel (biases may be merged in)


def test_a_user_option_overrides_the_default(step_and_image):
    # XLA:CPU's own combiner back: every gradient in one all-reduce of a tuple
    assert _all_reduces(_compiled(step_and_image, {"xla_disable_hlo_passes": ""})) == (1, 1)


def test_the_memory_optimized_schedule_holds_less(step_and_image):
    combined = {"xla_disable_hlo_passes": ""}
    sequential = _compiled(step_and_image, combined).memory()["temp"]
    concurrent = _compiled(step_and_image, {
        **combined, "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_DEFAULT"}).memory()["temp"]
    assert sequential < concurrent
