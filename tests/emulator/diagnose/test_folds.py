"""A clip split in time whose frames are folded into the batch (einops, tf.reshape) or
taken one at a time (Keras' TimeDistributed): the report names the user's line and the
per-frame layer or the other split that keeps it local; never for other reshapes."""
import inspect
import re

import keras
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.diagnose import folds, op_source, remedies
from spatial_tf.emulator.xla.hlo_text import collectives

B, T, H, W, C = 2, 4, 16, 16, 4
CLIP = (B, T, H, W, C)

FOLD_CONV = (
    "this reshape folds the split axis 1 of a [2, 4, 16, 16, 4] tensor into the batch (to "
    "[8, 16, 16, 4]), and a split survives a reshape only on the outermost merged axis, "
    "here the batch, so XLA gathers the whole tensor on every core. Fix: keep the clip 5-D "
    "with spatial_tf.layers.FrameConv2D (FrameConv2D.from_conv2d(conv) converts a "
    "keras.layers.Conv2D, weights included), which applies the 2D layer to each frame, or "
    "split another axis for this part: spatial_tf.split(x, [1, 1, 2, 1, 1]) before it."
)
FRAMES_CONV = (
    "this op takes one frame at a time along the split axis 1 of a [2, 4, 16, 16, 4] "
    "tensor (a per-frame loop, as Keras' TimeDistributed runs), so XLA sends each frame "
    "from the core that holds it to every core, and every core computes every frame. Fix: "
    "keep the clip 5-D with spatial_tf.layers.FrameConv2D (FrameConv2D.from_conv2d(conv) "
    "converts a keras.layers.Conv2D, weights included), which applies the 2D layer to each "
    "frame, or split another axis for this part: spatial_tf.split(x, [1, 1, 2, 1, 1]) "
    "before it."
)


def _line(fn, marker):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


@pytest.fixture(scope="module")
def conv():
    keras.utils.set_random_seed(0)
    layer = keras.layers.Conv2D(8, 3, padding="same")
    layer.build((None, H, W, C))
    return layer


def _train_step(spec, forward, weights):
    def step(x):
        x = spatial_tf.split(x, spec)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(forward(x) ** 2)
        return loss, tape.gradient(loss, weights)

    return step


@pytest.mark.parametrize("fold", ["einops", "tf.reshape"])
def test_a_time_split_folded_into_the_batch_gets_the_per_frame_fix(emulators, conv, fold):
    einops = pytest.importorskip("einops")

    def forward(x):
        if fold == "einops":
            y = einops.rearrange(x, "b t h w c -> (b t) h w c")  # LINE einops
            return einops.rearrange(conv(y), "(b t) h w c -> b t h w c", t=T)
        y = tf.reshape(x, [-1, H, W, C])  # LINE tf.reshape
        return tf.reshape(conv(y), [B, T, H, W, 8])

    step = _train_step([1, 2, 1, 1, 1], forward, conv.trainable_variables)
    report = emulators(2).report(step, (tf.ones(CLIP),))
    [warning] = report.warnings
    assert f"made at test_folds.py:{_line(forward, f'# LINE {fold}')} in forward" in warning
    assert warning.endswith("(1x, 32.0 KiB per core; f32[2,4,16,16,4]): " + FOLD_CONV
                            + " Kept split, it would need up to 16.0 KiB less per core.")
    assert report.ratio("temp") > 1.0  # more than the one-core step's memory


def test_time_distributed_conv2d_gets_the_per_frame_fix(emulators):
    keras.utils.set_random_seed(0)
    frames = keras.layers.TimeDistributed(keras.layers.Conv2D(8, 3, padding="same"),
                                          name="frames")
    frames.build((None,) + CLIP[1:])

    def forward(x):
        return frames(x)  # LINE time distributed

    step = _train_step([1, 2, 1, 1, 1], forward, frames.trainable_variables)
    report = emulators(2).report(step, (tf.ones(CLIP),))
    [warning] = report.warnings
    line = _line(forward, "# LINE time distributed")
    assert f"made at test_folds.py:{line} in forward: `return frames(x)" in warning
    # Keras 3 transposes the frames first and takes them one by one: each is sent to
    # every core (all-reduces), which is no gather kind but reassembles the clip all the same
    assert re.match(r"all-reduce and collective-permute of activation-sized frames at "
                    r"TensorFlow op 'frames(_\d+)?/strided_slice' and 3 more like it, made at",
                    warning), warning
    assert "): " + FRAMES_CONV + " Kept split" in warning
    assert report.ratio("temp") > 1.0


@pytest.mark.parametrize("case", ["height split, frames folded", "height split, TimeDistributed",
                                  "time split, height and width merged"])
def test_no_per_frame_fix_where_the_split_survives(emulators, conv, case):
    frames = keras.layers.TimeDistributed(conv)

    def forward(x):
        if case == "height split, frames folded":
            return conv(tf.reshape(x, [-1, H, W, C]))
        if case == "height split, TimeDistributed":
            return frames(x)
        return tf.reduce_sum(tf.reshape(x, [B, T, H * W, C]), axis=2)  # two unsplit axes

    spec = [1, 2, 1, 1, 1] if case.startswith("time") else [1, 1, 2, 1, 1]
    report = emulators(2).report(_train_step(spec, forward, conv.trainable_variables),
                                 (tf.ones(CLIP),))
    assert report.warnings == [], report.warnings
    assert "per-frame" not in str(report) and "folds the split axis" not in str(report)


def _graph(fn, *shapes):
    return tf.function(fn).get_concrete_function(*map(tf.TensorSpec, shapes)).graph


def _source(graph, op_type):
    [op] = [op for op in graph.get_operations() if op.type == op_type]
    return op_source.find(graph, op.name)


@pytest.mark.parametrize("after, layer", [
    (lambda y: tf.nn.max_pool2d(y, 2, 2, "VALID"), "spatial_tf.layers.FrameMaxPooling2D"),
    (lambda y: tf.nn.avg_pool2d(y, 2, 2, "VALID"), "spatial_tf.layers.FrameAveragePooling2D"),
    (lambda y: tf.image.resize(y, (24, 24)), "spatial_tf.layers.FrameResizing"),
    (lambda y: keras.layers.Resizing(8, 8, interpolation="nearest")(y),
     "spatial_tf.layers.FrameResizing"),
    (lambda y: tf.nn.relu(y) * 2.0, "a per-frame layer of spatial_tf.layers (FrameConv2D, "
                                    "FrameMaxPooling2D, FrameAveragePooling2D, FrameResizing)"),
], ids=["max pooling", "average pooling", "tf.image.resize", "Resizing", "other"])
def test_the_fix_names_the_per_frame_layer_of_the_op_after_the_fold(after, layer):
    graph = _graph(lambda x: after(tf.reshape(x, [-1, H, W, C])), CLIP)
    text = remedies.explain("all-gather", _source(graph, "Reshape"), 2, shape=list(CLIP),
                            gathered_axes=[1])
    assert text.startswith("this reshape folds the split axis 1 of a [2, 4, 16, 16, 4]")
    assert f"keep the clip 5-D with {layer}, which applies" in text


def test_other_reshapes_merging_the_batch_keep_their_own_fix():
    # the frames and rows folded (4-D left): another split, no per-frame layer
    graph = _graph(lambda x: tf.reshape(x, [-1, W, C]), CLIP)
    text = remedies.explain("all-gather", _source(graph, "Reshape"), 2, shape=list(CLIP),
                            gathered_axes=[2])
    assert text.startswith("this reshape folds the split axis 2 of a [2, 4, 16, 16, 4] "
                           "tensor into the batch (to [128, 16, 4])")
    assert text.endswith("Fix: Split another axis for this part: spatial_tf.split(x, "
                         "[1, 1, 1, 2, 1]) before it.")
    # every axis but the channels flattened (a per-pixel loss): the spatial-axes advice
    graph = _graph(lambda x: tf.reshape(x, [-1, C]), CLIP)
    text = remedies.explain("all-gather", _source(graph, "Reshape"), 2, shape=list(CLIP),
                            gathered_axes=[1])
    assert text.startswith("this reshape merges the batch with the split axes [0, 1, 2, 3]")
    # XLA says the split axis is not a folded one: not this fold
    graph = _graph(lambda x: tf.reshape(x, [-1, H, W, C]), CLIP)
    text = remedies.explain("all-gather", _source(graph, "Reshape"), 2, shape=list(CLIP),
                            gathered_axes=[3])
    assert "folds" not in text and text.startswith("this reshape merges the batch")


@pytest.mark.parametrize("before, after, axes", [
    ([2, 4, 16, 16, 3], [8, 16, 16, 3], [0, 1]),
    ([2, 4, 16, 16, 3], [128, 16, 3], [0, 1, 2]),
    ([2, 16, 16, 3], [32, 16, 3], [0, 1]),
    ([2, 16, 16, 3], [512, 3], []),              # nothing but the channels kept
    ([2, 4, 16, 16, 3], [2, 64, 16, 3], []),     # merges frames and rows, not the batch
    ([2, 4, 16, 16, 3], [8, 16, 48], []),        # merges the width and the channels too
    ([2, 4, 16, 16, 3], [2, 4, 16, 16, 3], []),
])
def test_fold_axes(before, after, axes):
    assert folds.fold_axes(before, after) == axes


@pytest.mark.parametrize("shape, folded, cores, spec", [
    ([2, 4, 16, 16, 3], [0, 1], 2, [1, 1, 2, 1, 1]),
    ([2, 4, 6, 16, 3], [0, 1], 4, [1, 1, 1, 4, 1]),    # 6 rows do not split 4 ways
    ([2, 4, 6, 6, 3], [0, 1], 4, None),
    ([2, 16, 16, 3], [0, 1], 2, [1, 1, 2, 1]),
])
def test_other_split(shape, folded, cores, spec):
    assert folds.other_split(shape, folded, cores) == spec


def test_xla_s_gather_dimensions_are_read():
    line = ("%all-gather = f32[2,4,16,16,4]{4,3,2,0,1} all-gather(%x), channel_id=1, "
            "replica_groups={{0,1}}, dimensions={1}, metadata={op_name=\"Reshape\"}")
    [gather] = collectives(line)
    assert gather.dimensions == (1,) and gather.op_name == "Reshape"
    [reduce] = collectives("%r = f32[8]{0} all-reduce(%x), to_apply=%add")
    assert reduce.dimensions == ()


def test_only_an_index_of_one_axis_is_a_frame():
    def slices(x):
        return x[:, 1], x[:, 1:2], x[..., 0], x[:, 0, 2]

    graph = _graph(slices, CLIP)
    taken = [folds.takes_frame(op) for op in graph.get_operations() if op.type == "StridedSlice"]
    assert taken == [1, None, None, None]
