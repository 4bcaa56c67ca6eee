"""Model Garden's MoViNet-A0 trained split in space and in time on the emulator.

The base backbone (``official.projects.movinet``, random initialization, nothing
downloaded) with ``MovinetClassifier``'s head, made partition-friendly, takes one SGD step
on 8x64x64 clips on ``Emulator(4)``: the loss is finite, and the partitioned step computes
what the unpartitioned one does (``compare``, which also checks float32 differences in
float64). Its convolutions are grouped depthwise ``Conv3D`` layers (``groups`` equal to
the channels), tf_keras' fused batch norm, squeeze-excitation pooling and stride-2
downsampling in space (never in time); its ReZero weights, which start at 0, are set to
0.5 so that the step trains, and compares, every weight. It needs tf-models-official, so it runs in the
Model Garden environment (``.ci/run``); elsewhere the file is skipped.
"""
import math

import pytest

pytest.importorskip(
    "official.projects.movinet",
    reason="Model Garden (tf-models-official) is not installed: tests/integration runs in "
    "its own environment, see .ci/run",
)

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from official.projects.movinet.modeling import movinet, movinet_model  # noqa: E402

import spatial_tf  # noqa: E402

FRAMES, SIZE, BATCH, CLASSES = 8, 64, 2, 5


def _model():
    spec = tf_keras.layers.InputSpec(shape=[None, FRAMES, SIZE, SIZE, 3])
    backbone = movinet.Movinet(model_id="a0", input_specs=spec)
    model = movinet_model.MovinetClassifier(backbone, num_classes=CLASSES,
                                            input_specs={"image": spec})
    model.build([BATCH, FRAMES, SIZE, SIZE, 3])
    # each block's residual branch is scaled by a ReZero weight that starts at 0, so a first
    # step would train only the skip paths and the head: set them as a trained model has them,
    # so that every convolution's gradient is computed and compared
    rezero = [v for v in model.trainable_variables if v.shape.rank == 0 and "scale" in v.name]
    assert len(rezero) == 15   # one per block of A0
    for v in rezero:
        v.assign(0.5)
    return model


@pytest.mark.slow
@pytest.mark.parametrize("spec", [[1, 1, 2, 2, 1], [1, 4, 1, 1, 1]],
                         ids=["space_1x1x2x2x1", "time_1x4x1x1x1"])
def test_one_step_split_in_space_or_time_matches_the_unpartitioned_step(spec):
    emulator = spatial_tf.Emulator(num_cores_per_replica=4)
    with emulator.scope():
        tf_keras.utils.set_random_seed(0)
        model = _model()
        optimizer = tf_keras.optimizers.SGD(0.01)
    changes = spatial_tf.layers.partition_friendly(model, warn=False)
    assert sum(c.changed for c in changes) > 0
    clips = tf.random.stateless_normal((BATCH, FRAMES, SIZE, SIZE, 3), (0, 1))
    labels = tf.constant([1, 3])

    def step(clips, labels):
        clips = spatial_tf.split(clips, spec)
        with tf.GradientTape() as tape:
            logits = model(clips, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    comparison = emulator.compare(step, (clips, labels), reference="unpartitioned")
    assert comparison.ok, str(comparison)
    before = [v.numpy() for v in model.trainable_variables]
    loss = float(emulator.run(step, (clips, labels)))
    assert math.isfinite(loss) and 0.0 < loss < 20.0
    changed = sum(bool((a != b.numpy()).any()) for a, b in zip(before, model.trainable_variables))
    assert changed == len(before), f"{len(before) - changed} weights not updated"
