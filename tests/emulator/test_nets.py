"""Partitioned training steps of 2D and 3D conv nets match the unpartitioned run.

Each case trains one step of a U-Net (convolutions with SAME or VALID padding, max
pooling or stride-2 convolutions, transposed convolutions, batch norm in training mode,
concatenated skips) with a Keras optimizer, and compares the loss, the logits (forward),
every gradient and every variable update (optimizer step, batch-norm statistics) with
the same program run unpartitioned, to fp32 tolerance (1e-5 relative).

Adam divides by sqrt(v) + epsilon, so where a gradient is near epsilon its first update
magnifies the last-bit differences any change of summation order makes; its gradients
match to 1e-5 but its updates only to about 1e-3 (measured up to 4.6e-4).
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.models import UNetOptions, unet

pytestmark = pytest.mark.slow  # each compiles and runs a U-Net train step twice

EXTENDED = pytest.mark.extended   # tools/extended_tests.py runs these
CASES = [
    # input shape (no batch), U-Net options, spec, cores
    ((16, 32, 3), UNetOptions(padding="same", downsample="conv"), [1, 2, 4, 1], 8),
    pytest.param((20, 20, 3), UNetOptions(padding="valid", downsample="pool"), [1, 2, 4, 1], 8,
                 marks=EXTENDED),
    pytest.param((16, 16, 3), UNetOptions(padding="same", downsample="pool"), [1, 2, 2, 1], 4,
                 marks=EXTENDED),
    ((20, 20, 3), UNetOptions(padding="valid", downsample="pool"), [1, 1, 2, 1], 2),
    ((16, 16, 3), UNetOptions(padding="same", downsample="conv"), [1, 1, 1, 1], 1),
    pytest.param((16, 16, 16, 1), UNetOptions(padding="same", downsample="pool"),
                 [1, 8, 1, 1, 1], 8, marks=EXTENDED),
    ((16, 16, 16, 1), UNetOptions(padding="same", downsample="pool"), [1, 2, 2, 2, 1], 8),
    pytest.param((24, 24, 24, 1), UNetOptions(padding="valid", downsample="pool"),
                 [1, 2, 2, 1, 1], 4, marks=EXTENDED),
    ((16, 16, 16, 1), UNetOptions(padding="same", downsample="conv"), [1, 2, 1, 1, 1], 2),
]


def make_train_step(model, optimizer, spec, label_spec):
    def train_step(image, labels):
        image, labels = spatial_tf.split((image, labels), [spec, label_spec])
        with tf.GradientTape() as tape:
            logits = model(image, training=True)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {"loss": loss, "logits": logits, "grads": grads}

    return train_step


def _label_spec(spec, shape):
    """The image's split without its channel axis, if the labels divide evenly."""
    dims = spec[:-1]
    if all(s % d == 0 for s, d in zip(shape, dims)):
        return dims
    return None


@pytest.mark.parametrize(
    "input_shape, options, spec, cores", CASES,
    ids=[f"{len(c[0]) - 1}d-{c[1].padding}-{c[1].downsample}-{'x'.join(map(str, c[2]))}"
         for c in (getattr(case, "values", case) for case in CASES)],
)
def test_train_step_matches_unpartitioned(emulators, input_shape, options, spec, cores):
    model, step, args = _case(input_shape, options, spec, keras.optimizers.SGD(0.1, momentum=0.9))

    result = emulators(cores).compare(step, args=args)

    assert result.ok, str(result)
    paths = [r.path for r in result.rows]
    assert "outputs['loss']" in paths and "outputs['logits']" in paths
    assert sum(p.startswith("outputs['grads']") for p in paths) == len(model.trainable_variables)
    updated = {p for p in paths if p.startswith("update of ")}
    assert any("moving_mean" in p for p in updated) and any("kernel_momentum" in p for p in updated)
    assert any(p.startswith("update of sgd") and p.endswith("/iteration") for p in updated)


def test_adam_step_matches_within_its_conditioning(emulators):
    _, step, args = _case((16, 16, 16, 1), UNetOptions(padding="same", downsample="pool"),
                          [1, 2, 2, 2, 1], keras.optimizers.Adam(1e-2))

    result = emulators(8).compare(step, args=args)

    outputs = [r for r in result.rows if r.path.startswith("outputs")]
    updates = [r for r in result.rows if r.path.startswith("update of")]
    assert all(r.ok for r in outputs), str(result)
    assert max(r.max_rel for r in updates) < 1e-3, str(result)


def _case(input_shape, options, spec, optimizer):
    keras.utils.set_random_seed(0)
    model = unet(input_shape, num_classes=3, depth=2, base_filters=4, options=options)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    image = rng.normal(size=(2,) + input_shape).astype("float32")
    out_shape = (2,) + model.output_shape[1:-1]
    labels = rng.integers(0, 3, size=out_shape).astype("int32")
    step = make_train_step(model, optimizer, spec, _label_spec(spec, out_shape))
    return model, step, (image, labels)
