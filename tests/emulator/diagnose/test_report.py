"""Emulator.report: per-core memory vs unpartitioned, collectives, gather warnings;
and the evidence behind replicating TPUEstimator's [1] ("core 0 only") under SPMD."""
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.annotate import annotate_tensor
from spatial_tf.emulator.xla.hlo_text import collectives, shape_bytes
from spatial_tf.spec import Assign, Replicate


def _two_convs(w1, w2, spec):
    def step(image):
        image = spatial_tf.split(image, spec)
        with tf.GradientTape() as tape:
            y = tf.nn.relu(tf.nn.conv2d(image, w1, 1, "SAME"))
            y = tf.nn.conv2d(y, w2, 1, "SAME")
            loss = tf.reduce_mean(y**2)
        g1, g2 = tape.gradient(loss, [w1, w2])
        w1.assign_sub(0.01 * g1)
        w2.assign_sub(0.01 * g2)
        return loss

    return step


@pytest.fixture(scope="module")
def weights():
    return (tf.Variable(tf.random.stateless_normal([3, 3, 4, 16], seed=[0, 1])),
            tf.Variable(tf.random.stateless_normal([3, 3, 16, 4], seed=[0, 2])))


def test_spatial_split_report(emulators, weights):
    image = tf.ones([2, 64, 64, 4])
    report = emulators(8).report(_two_convs(*weights, [1, 2, 4, 1]), args=(image,))

    assert report.num_cores_per_replica == 8 and report.num_replicas == 1
    # the image is cut in 8: its per-core argument bytes shrink accordingly
    image_bytes = 2 * 64 * 64 * 4 * 4
    assert report.unpartitioned["argument"] - report.partitioned["argument"] == image_bytes - image_bytes // 8
    assert report.ratio("temp") < 0.25
    kinds = report.by_kind()
    assert kinds["collective-permute"]["count"] > 0  # halos
    assert kinds["all-reduce"]["count"] > 0  # weight gradients and the loss
    assert "all-gather" not in kinds and report.warnings == []
    text = str(report)
    for expected in ("per core", "unpartitioned", "collective-permute", "halo exchange", "peak"):
        assert expected in text
    as_dict = report.to_dict()
    assert as_dict["by_kind"]["all-reduce"]["count"] == kinds["all-reduce"]["count"]
    assert as_dict["partitioned"]["temp"] == report.partitioned["temp"]


def test_a_tensor_spec_reports_as_a_tensor_and_cannot_run(emulators, weights):
    step = _two_convs(*weights, [1, 2, 4, 1])
    emulator = emulators(8)
    by_spec = emulator.report(step, (tf.TensorSpec([2, 64, 64, 4]),))
    by_tensor = emulator.report(step, (tf.ones([2, 64, 64, 4]),))
    assert by_spec.partitioned == by_tensor.partitioned
    assert by_spec.unpartitioned == by_tensor.unpartitioned
    before = [w.numpy() for w in weights]
    for call, what in ((emulator.run, "run"), (emulator.compare, "compare")):
        with pytest.raises(TypeError, match=r"step: args\[0\] is TensorSpec\(shape=\(2, 64, "
                                            rf"64, 4\).*which has no values; {what} "):
            call(step, (tf.TensorSpec([2, 64, 64, 4]),))
    assert all(np.array_equal(w.numpy(), b) for w, b in zip(weights, before))


def test_gathered_activation_is_named(emulators, weights):
    w1, _ = weights
    dense = tf.Variable(tf.ones([64 * 64 * 16, 1]) * 1e-3)

    def step(image):
        image = spatial_tf.split(image, [1, 2, 4, 1])
        y = tf.nn.conv2d(image, w1, 1, "SAME")
        flat = tf.reshape(y, [2, -1], name="flatten_features")  # merges the split axes
        return tf.reduce_sum(tf.matmul(flat, dense))

    report = emulators(8).report(step, args=(tf.ones([2, 64, 64, 4]),))

    gathers = [c for c in report.collectives if c.kind in ("all-gather", "all-to-all")]
    assert gathers and report.warnings
    assert any("'flatten_features'" in w for w in report.warnings), report.warnings
    assert "Fix: [1, 8, 1, 1] keeps this reshape local" in str(report)
    quiet = emulators(8).report(step, args=(tf.ones([2, 64, 64, 4]),), gather_threshold_bytes=10**12)
    assert quiet.warnings == []


def test_core_zero_only_costs_more_than_replicating(emulators):
    """Evidence for the foundation's choice: TPUEstimator's [1] is replicated under SPMD.

    A label assigned whole to core 0 (XLA "maximal" sharding) still compiles and gives
    the same loss and update, but XLA then broadcasts it from core 0 with an all-reduce
    of its full size and needs more temporary memory on every core; replicating it needs
    neither. The figures are in docs/emulator.md.
    """
    w = tf.Variable(tf.random.stateless_normal([3, 3, 4, 1], seed=[3, 4]))
    image = tf.random.stateless_normal([2, 64, 64, 4], seed=[5, 6])
    label = tf.random.stateless_normal([2, 64, 64, 1], seed=[7, 8])

    def make(label_leaf):
        def step(image, label):
            # split() refuses Assign under SPMD (as TPUStrategy does); annotate directly
            image = spatial_tf.split(image, [1, 2, 4, 1])
            label = annotate_tensor(label, label_leaf, 8)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.nn.conv2d(image, w, 1, "SAME") - label) ** 2)
            w.assign_sub(0.01 * tape.gradient(loss, w))
            return loss

        return step

    emulator = emulators(8)
    replicated, core0 = make(Replicate()), make(Assign(0))
    r_rep = emulator.report(replicated, args=(image, label))
    r_core0 = emulator.report(core0, args=(image, label))
    label_bytes = 2 * 64 * 64 * 1 * 4

    w0 = w.numpy()
    loss_core0 = float(emulator.run(core0, args=(image, label)))
    w_core0 = w.numpy()
    w.assign(w0)
    assert float(emulator.run(replicated, args=(image, label))) == pytest.approx(loss_core0, rel=1e-6)
    np.testing.assert_allclose(w.numpy(), w_core0, rtol=1e-6)
    big = [c for c in r_core0.collectives if c.kind == "all-reduce" and c.bytes >= label_bytes]
    assert big and not [c for c in r_rep.collectives if c.kind == "all-reduce" and c.bytes >= label_bytes]
    assert r_core0.partitioned["temp"] > r_rep.partitioned["temp"]
    assert r_core0.partitioned["argument"] >= r_rep.partitioned["argument"]


def test_replica_layout_in_report(emulators, weights):
    # args are one replica's: each of the 2 replicas runs its own program over 4 cores
    report = emulators(4, replicas=2).report(_two_convs(*weights, [1, 2, 2, 1]), args=(tf.ones([2, 32, 32, 4]),))
    assert report.num_replicas == 2 and "2 replicas x 4 cores" in str(report)
    # with several replicas the emulator passes each replica's arguments whole to its cores
    image_bytes = 2 * 32 * 32 * 4 * 4
    assert report.partitioned["argument"] >= image_bytes
    assert report.partitioned["temp"] < report.unpartitioned["temp"]


def test_hlo_text_parsing():
    text = "\n".join([
        '  %cp = f32[2,1,8,4]{3,2,1,0} collective-permute(%x), channel_id=1, source_target_pairs={{0,1}}, metadata={op_type="Conv2D" op_name="conv"}',
        '  ROOT %ar = (f32[3,3,4,16]{3,2,1,0}, f32[16]{0}) all-reduce(%a, %b), replica_groups={{0,1}}, to_apply=%add',
        '  %ags = (f32[2,4]{1,0}, f32[2,16]{1,0}) all-gather-start(%y), dimensions={1}, metadata={op_name="gather_me"}',
        '  %add = f32[4]{0} add(%p, %q)',
    ])
    found = collectives(text)
    assert [(c.kind, c.bytes, c.op_name) for c in found] == [
        ("collective-permute", 2 * 8 * 4 * 4, "conv"),
        ("all-reduce", (3 * 3 * 4 * 16 + 16) * 4, ""),
        ("all-gather", 2 * 16 * 4, "gather_me"),
    ]
    assert shape_bytes("pred[8]") == 8 and shape_bytes("bf16[2,2]") == 8 and shape_bytes("f32[]") == 4
    assert np.isclose(shape_bytes("s64[3]"), 24)


def test_gather_threshold_is_an_eighth_of_the_smallest_activation_sized_piece(emulators):
    """A split argument far smaller than the image (a batch's class ids) does not make
    every small gather "activation-sized"; one within 64x of it does."""
    def step(image, other):
        image, other = spatial_tf.split((image, other), [[1, 2, 4, 1], [8, 1]])
        return tf.reduce_sum(image) + tf.reduce_sum(other)

    image = tf.ones([2, 64, 64, 4])  # 128 KiB: 16 KiB per core
    tiny = emulators(8).report(step, args=(image, tf.ones([8, 8])))  # 32 B per core
    assert tiny.gather_threshold_bytes == 16 * 1024 // 8
    near = emulators(8).report(step, args=(image, tf.ones([8, 512])))  # 2 KiB per core
    assert near.gather_threshold_bytes == 2 * 1024 // 8
