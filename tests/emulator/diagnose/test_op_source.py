"""The line a report names is the user's: after partition_friendly, inside nested
tf.functions, and never a spatial_tf module that builds ops for users."""
import inspect
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf import frames
from spatial_tf.emulator import Emulator
from spatial_tf.emulator.diagnose import op_source

HERE = os.path.abspath(__file__)
PACKAGE = os.path.dirname(os.path.abspath(spatial_tf.__file__))


def test_the_modules_that_build_ops_for_users_declare_themselves():
    import spatial_tf.layers  # noqa: F401  (imports the layer modules)
    import spatial_tf.update_order  # noqa: F401

    declared = set(frames.excluded())
    expected = {os.path.join(PACKAGE, f) for f in
                ("annotate.py", "layers.py", "halo_conv.py", "partition_friendly.py",
                 "update_order.py")} | {os.path.join(PACKAGE, "emulator", "")}
    assert expected <= declared, sorted(expected - declared)
    assert not frames.is_excluded(HERE)


class Net(keras.Model):
    """Strided, transposed and depthwise convolutions, each called on its own line."""

    def __init__(self):
        super().__init__()
        self.strided = keras.layers.Conv2D(4, 3, strides=2, padding="same")
        self.up = keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same")
        self.depthwise = keras.layers.DepthwiseConv2D(3, padding="same")

    def call(self, x):
        x = self.strided(x)  # LINE strided
        x = self.up(x)  # LINE up
        return self.depthwise(x)  # LINE depthwise


def _line(tag):
    source, start = inspect.getsourcelines(Net)
    return start + next(i for i, text in enumerate(source) if f"# LINE {tag}" in text)


def test_after_partition_friendly_each_convolution_is_traced_to_the_users_line():
    model = Net()
    model(tf.zeros([1, 16, 16, 2]))
    with pytest.warns(UserWarning, match="keeps TensorFlow's own gradient"):
        changes = spatial_tf.layers.partition_friendly(model)
    # the strided and the transposed ones are ordered; the depthwise one is left as it is
    # (XLA partitions it without gathers) and counts as handled
    changed = spatial_tf.layers.changed_layers(changes)
    assert [path.split("/")[-1] for path in changed] == [model.strided.name, model.up.name]
    assert [c.handled for c in changes if c.path.endswith(model.depthwise.name)] == [True]
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)

    def train_step(x):
        x = spatial_tf.split(x, [1, 2, 1, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        optimizer.apply(tape.gradient(loss, model.trainable_variables),
                        model.trainable_variables)
        return loss

    graph = Emulator(2).lower(train_step, (tf.zeros([1, 16, 16, 2]),)).traced.graph
    for tag, op_type in (("strided", "Conv2D"), ("up", "Conv2DBackpropInput"),
                         ("depthwise", "DepthwiseConv2dNative")):
        # each type is made once in the forward pass, by that layer
        ops = [op for op in graph.get_operations()
               if op.type == op_type and not op.name.startswith("gradient_tape")]
        assert len(ops) == 1, f"{op_type}: {[op.name for op in ops]}"
        for op in ops:
            frame = op_source.find(graph, op.name).frame
            assert (frame.filename, frame.lineno) == (HERE, _line(tag)), (op.name, frame)


def test_a_gather_inside_a_nested_tf_function_names_the_line_in_it():
    @tf.function(jit_compile=True)
    def flatten(x):
        return tf.reshape(x, [-1])  # the split rows merged with the columns: a gather

    line = inspect.getsourcelines(flatten.python_function)[1] + 2

    def step(x):
        x = spatial_tf.split(x, [1, 4, 1])
        return tf.reduce_sum(tf.sort(flatten(x * 2.0)))

    report = Emulator(4).report(step, (np.ones([2, 64, 64], np.float32),))
    gathers = [w for w in report.warnings if "Reshape" in w]
    assert gathers, report
    assert f"made at test_op_source.py:{line} in flatten" in gathers[0]


def test_an_op_name_that_is_nowhere_has_no_source():
    graph = tf.function(lambda x: x * 2).get_concrete_function(tf.TensorSpec([2])).graph
    assert op_source.find(graph, "no/such/op") is None
    assert op_source.find(graph, "StatefulPartitionedCall/Conv2D") is None


def test_a_third_party_librarys_frame_gives_way_to_the_users_line_that_called_it():
    einops = pytest.importorskip("einops")

    def step(x):
        x = spatial_tf.split(x, [1, 2, 1, 1, 1])
        folded = einops.rearrange(x, "b t h w c -> (b t) h w c")  # LINE fold
        return tf.reduce_sum(tf.sort(tf.reshape(folded, [-1])))

    source, start = inspect.getsourcelines(step)
    line = start + next(i for i, text in enumerate(source) if "# LINE fold" in text)
    graph = Emulator(2).lower(step, (tf.zeros([1, 4, 8, 8, 2]),)).traced.graph
    reshapes = [op for op in graph.get_operations() if op.type == "Reshape"]
    made = {op.name: op_source.find(graph, op.name).frame for op in reshapes}
    # einops' own frame (its backend calls tf.reshape) is inside site-packages
    assert any(os.sep + "einops" + os.sep in f.filename
               for op in reshapes for f in op.traceback)
    folds = [name for name, frame in made.items() if frame.lineno == line]
    assert folds and all(made[n].filename == HERE for n in folds), made
    assert not [f for f in made.values() if os.sep + "einops" + os.sep in f.filename]


def test_installed_code_is_the_users_line_when_nothing_else_is_left(monkeypatch):
    class Frame:
        def __init__(self, filename, lineno):
            self.filename, self.lineno = filename, lineno

    class Op:
        traceback = [Frame(os.path.join(p, "zoo", "model.py"), 7)
                     for p in op_source._installed_paths()[:1]]

    assert op_source.user_frame(Op()).lineno == 7
    Op.traceback = [Frame(HERE, 3)] + Op.traceback
    assert op_source.user_frame(Op()).filename == HERE
    Op.traceback = []
    assert op_source.user_frame(Op()) is None
