"""Each gather warning names the user's line that made the op and the fix for that op."""
import inspect

import keras
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.diagnose import op_source, remedies


@pytest.mark.parametrize("before, after, axes", [
    ([2, 32, 32, 4], [2, 4096], [1, 2, 3]),
    ([2, 32, 32, 5], [2048, 5], [0, 1, 2]),
    ([2, 8, 8, 3], [2, 8, 24], [2, 3]),
    ([2, 1, 8, 3], [2, 8, 3], []),          # only a size-1 axis merged: nothing moves
    ([2, 64], [2, 8, 8], []),               # splits an axis, merges none
    ([2, 8, 8], [2, 8, 8], []),
])
def test_merged_axes(before, after, axes):
    assert remedies.merged_axes(before, after) == axes


@pytest.mark.parametrize("before, after, cores, spec", [
    ([2, 32, 32, 4], [2, 4096], 4, [1, 4, 1, 1]),
    ([2, 8, 8, 3], [2, 8, 24], 8, [1, 1, 8, 1]),
    ([2, 1, 32, 4], [2, 128], 4, [1, 1, 4, 1]),   # the outermost axis of size > 1
    ([2, 6, 32, 4], [2, 768], 4, None),           # 6 does not split 4 ways
    ([2, 32, 32, 5], [2048, 5], 4, None),          # merges the batch
    ([2, 64], [2, 8, 8], 4, None),
])
def test_contiguous_spec(before, after, cores, spec):
    assert remedies.contiguous_spec(before, after, cores) == spec


def _graph(fn, *specs):
    return tf.function(fn).get_concrete_function(*specs).graph


def _op_named(graph, op_type, scope=""):
    [op] = [op for op in graph.get_operations()
            if op.type == op_type and op.name.startswith(scope)]
    return op.name


X = tf.TensorSpec([2, 16, 16, 4])


@pytest.mark.parametrize("make, op_type, expected", [
    (lambda x: tf.nn.conv2d(x, tf.ones([3, 3, 4, 4]), 1, "SAME"), "Conv2D",
     "spatial_tf.layers.partition_friendly(model) computes it from halo exchanges"),
    (lambda x: tf.nn.conv2d(x, tf.ones([3, 3, 4, 4]), 2, "SAME"), "Conv2D",
     "this strided convolution's pieces per core are too small"),
    (lambda x: tf.nn.conv2d(x, tf.ones([3, 3, 4, 4]), 1, "SAME", dilations=2), "Conv2D",
     "this dilated convolution's"),
    (lambda x: tf.nn.depthwise_conv2d(x, tf.ones([3, 3, 4, 1]), [1, 1, 1, 1], "SAME"),
     "DepthwiseConv2dNative", "this depthwise convolution's"),
    (lambda x: tf.nn.conv2d_transpose(x, tf.ones([3, 3, 4, 4]), [2, 32, 32, 4], 2),
     "Conv2DBackpropInput", "this transposed convolution's"),
    (lambda x: tf.compat.v1.nn.fused_batch_norm(x, tf.ones([4]), tf.zeros([4]))[0],
     "FusedBatchNormV3", "spatial_tf.layers.partition_friendly(model) unfuses it"),
    (lambda x: keras.losses.categorical_crossentropy(tf.ones_like(x), x, from_logits=True),
     "SoftmaxCrossEntropyWithLogits",
     "Fix: spatial_tf.losses.categorical_crossentropy(y_true, y_pred, from_logits=...)"),
    (lambda x: tf.reshape(x, [2, -1]), "Reshape", "Fix: [1, 4, 1, 1] keeps this reshape local"),
    (lambda x: tf.reshape(x, [-1, 4]), "Reshape",
     "this reshape merges the batch with the split axes [0, 1, 2] of a [2, 16, 16, 4] tensor"),
    (lambda x: tf.transpose(x, [0, 2, 1, 3]), "Transpose",
     "this op cannot work on the split pieces"),
    (lambda x: tf.concat([x[:, :2], x], axis=1), "ConcatV2",
     "this concatenation along axis 1 (2 + 16) gives a result whose pieces"),
    (lambda x: tf.concat([x, x[..., :1]], axis=-1), "ConcatV2",
     "this concatenation along axis 3 (4 + 1)"),
    (lambda x: tf.math.cumsum(x, axis=2), "Cumsum",
     "a cumulative sum along axis 2 needs every earlier piece of that axis"),
    (lambda x: tf.math.cumprod(x, axis=-3), "Cumprod", "a cumulative product along axis 1"),
])
def test_the_fix_follows_the_op(make, op_type, expected):
    graph = _graph(make, X)
    source = op_source.find(graph, _op_named(graph, op_type))
    assert source.op.type == op_type
    assert expected in remedies.explain("all-gather", source, 4)


def test_keras_sparse_cross_entropy_is_named_by_its_scope():
    def loss(x):
        labels = tf.zeros([2, 16, 16], tf.int32)
        return keras.losses.sparse_categorical_crossentropy(labels, x, from_logits=True)

    graph = _graph(loss, X)
    reshapes = [op.name for op in graph.get_operations()
                if op.type == "Reshape" and op.name.startswith("SparseSoftmaxCrossEntropy")]
    assert len(reshapes) >= 2  # the logits' and the labels'
    for name in reshapes:
        assert ("Fix: spatial_tf.losses.sparse_categorical_crossentropy(y_true, y_pred, "
                "from_logits=...)") in remedies.explain("all-gather", op_source.find(graph, name), 4)


def test_unknown_ops_get_the_general_reason():
    assert remedies.explain("all-to-all", None, 4) == remedies.GENERIC["all-to-all"]
    assert remedies.explain("all-gather", None, 4, "x/FusedBatchNormV3") == remedies.FUSED_BATCH_NORM


def _line_of(fn, marker):
    lines, first = inspect.getsourcelines(fn)
    [offset] = [i for i, text in enumerate(lines) if marker in text]
    return first + offset


def test_a_gradient_op_is_traced_to_the_forward_op_and_the_users_line():
    kernel = tf.Variable(tf.ones([3, 3, 4, 4]))

    def step(x):
        with tf.GradientTape() as tape:
            with tf.name_scope("conv"):
                y = tf.nn.conv2d(x, kernel, 1, "SAME")  # the forward line
            z = tf.nn.conv2d(x, kernel, 1, "SAME")  # outside any scope
            loss = tf.reduce_sum(y) + tf.reduce_sum(z)
        return tape.gradient(loss, kernel)  # the gradient line

    graph = _graph(step, X)
    name = _op_named(graph, "Conv2DBackpropFilter", "gradient_tape/conv/")
    source = op_source.find(graph, name)
    assert source.gradient and source.op.name == "conv/Conv2D"
    assert source.where() == (f"test_remedies.py:{_line_of(step, '# the forward line')} in "
                              "step: `y = tf.nn.conv2d(x, kernel, 1, \"SAME\")  # the forward line`")
    assert "partition_friendly(model) computes it" in remedies.explain("all-gather", source, 4)
    # unscoped: the gradient op is its own source, at the tape.gradient line
    [name] = [op.name for op in graph.get_operations()
              if op.type == "Conv2DBackpropFilter" and not op.name.startswith(name)]
    source = op_source.find(graph, name)
    assert not source.gradient and source.op.type == "Conv2DBackpropFilter"
    assert source.frame.lineno == _line_of(step, "# the gradient line")
    assert "partition_friendly(model) computes it" in remedies.explain("all-gather", source, 4)
    data_gradient = op_source.find(graph, _op_named(graph, "Conv2DBackpropInput", "gradient_tape/C"))
    assert "partition_friendly(model) computes it" in remedies.explain("all-gather", data_gradient, 4)
    assert op_source.find(graph, "no/such/op") is None
    assert op_source.find(graph, "gradient_tape/no/such/op") is None
    assert op_source.find(None, name) is None and op_source.find(graph, "") is None


def test_a_keras_layers_op_is_placed_at_the_users_call_not_inside_keras():
    layer = keras.layers.Conv2D(4, 3, padding="same")

    def step(x):
        return layer(x)  # the call

    graph = _graph(step, X)
    frame = op_source.find(graph, _op_named(graph, "Conv2D")).frame
    assert frame.name == "step" and "# the call" in inspect.getsource(step).splitlines()[1]
    assert frame.filename == __file__


class FlattenNet(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv = keras.layers.Conv2D(4, 3, padding="same")
        self.dense = keras.layers.Dense(2)

    def call(self, x):
        y = self.conv(x)
        y = tf.reshape(y, [2, -1])  # flattens the split width
        return self.dense(y)


@pytest.mark.emulator
def test_report_warnings_name_the_line_the_fix_and_the_saving(emulators):
    emulator = emulators(4)
    with emulator.scope():
        net = FlattenNet()
        net(tf.zeros([2, 32, 32, 3]))

    def step(x):
        x = spatial_tf.split(x, [1, 1, 4, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(net(x))
        return tape.gradient(loss, net.trainable_variables)

    warnings = emulator.report(step, (tf.ones([2, 32, 32, 3]),)).warnings
    [reshape] = [w for w in warnings if "Reshape'" in w]
    line = inspect.getsourcelines(FlattenNet.call)[1] + 2
    assert f"made at test_remedies.py:{line} in call: `y = tf.reshape(y, [2, -1])" in reshape
    # a float32 [2, 32, 32, 4] tensor (32 KiB) gathered where a quarter would do
    assert "(1x, 32.0 KiB per core; f32[2,32,32,4])" in reshape
    assert "Fix: [1, 4, 1, 1] keeps this reshape local" in reshape
    assert reshape.endswith("Kept split, it would need up to 24.0 KiB less per core.")
    [conv] = [w for w in warnings if "Conv2DBackpropFilter" in w]
    assert f"the gradient of the op made at test_remedies.py:{line - 1} in call" in conv
    assert "spatial_tf.layers.partition_friendly(model)" in conv


@pytest.mark.emulator
@pytest.mark.parametrize("whole_gradients", [False, True])
def test_a_kernel_tiled_by_xla_is_named_as_such_and_whole_gradients_end_it(emulators,
                                                                          whole_gradients):
    emulator = emulators(4)
    with emulator.scope():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((64, 64, 3))
        x = inputs
        for _ in range(5):   # down to 2x2: narrower than the split at the deepest level
            x = keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")(x)
        model = keras.Model(inputs, keras.layers.Conv2D(32, 3, padding="same")(x))
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)

    def step(image):
        image = spatial_tf.split(image, [1, 4, 1, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(image) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        if whole_gradients:
            grads = spatial_tf.split(grads, [None] * len(grads))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    warnings = emulator.report(step, (tf.ones([2, 64, 64, 3]),)).warnings
    kernel = [w for w in warnings if "f32[4,3,32,32]" in w]
    if whole_gradients:
        assert kernel == []
    else:
        assert kernel and all(
            "this is a convolution's kernel [3, 3, 32, 32] (or its gradient), not an "
            "activation" in w and "grads = spatial_tf.split(grads, [None] * len(grads))" in w
            for w in kernel)


@pytest.mark.parametrize("shape, kernel, cores, expected", [
    ([4, 3, 256, 256], [3, 3, 256, 256], 4, True),
    ([3, 3, 256, 256], [3, 3, 256, 256], 4, True),
    ([8, 3, 256, 256], [3, 3, 256, 256], 4, False),    # padded by more than the cores
    ([4, 3, 128, 256], [3, 3, 256, 256], 4, False),    # other channels
    ([2, 64, 64, 256], [3, 3, 256, 256], 4, False),    # an activation
    ([4, 3, 3, 8, 8], [3, 3, 3, 8, 8], 2, True),       # a 3D kernel, 3 padded to 4 for 2 cores
    ([2, 4, 256, 256], [3, 3, 256, 256], 4, True),     # gathered on axis 1 only, a piece on 0
    ([1, 2, 256, 256], [3, 3, 256, 256], 4, True),     # a piece on both window axes
    ([0, 3, 256, 256], [3, 3, 256, 256], 4, False),    # an empty axis
    ([4, 3, 256, 256], [], 4, False),
])
def test_is_kernel_piece(shape, kernel, cores, expected):
    assert remedies.is_kernel_piece(shape, kernel, cores) == expected


DEEP = tf.TensorSpec([2, 2, 4, 8])  # a deep, downsampled level


def _conv_and_gradients(x, kernel):
    with tf.GradientTape() as tape:
        tape.watch([x, kernel])
        loss = tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME") ** 2)
    return tape.gradient(loss, [x, kernel])


@pytest.mark.parametrize("op_type", ["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"])
def test_a_level_smaller_than_twice_the_window_is_named_with_its_shape(op_type):
    graph = _graph(_conv_and_gradients, DEEP, tf.TensorSpec([3, 3, 8, 8]))
    source = op_source.find(graph, _op_named(graph, op_type))
    text = remedies.explain("all-gather", source, 4)
    assert text.startswith("at this level the convolution's input is 2x4 with a 3x3 window")
    assert "Fix: split fewer ways at this level" in text
    assert "partition_friendly(model) computes" not in text


@pytest.mark.parametrize("spec, kernel", [
    (tf.TensorSpec([2, 6, 6, 8]), [3, 3, 8, 8]),  # 6 = twice the window: pieces can hold it
    (tf.TensorSpec([2, 2, 4, 8]), [1, 1, 8, 8]),  # a 1x1 window needs no neighbours
])
def test_a_level_large_enough_for_its_window_keeps_the_convolution_fix(spec, kernel):
    graph = _graph(lambda x: tf.nn.conv2d(x, tf.ones(kernel), 1, "SAME"), spec)
    source = op_source.find(graph, _op_named(graph, "Conv2D"))
    assert remedies.explain("all-gather", source, 4).startswith(
        "the kernel gradient of this stride-1 convolution")


@pytest.mark.emulator
def test_after_partition_friendly_a_deep_levels_gather_names_the_level(emulators):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 4))
    x = spatial_tf.layers.Split([1, 2, 2, 1])(inputs)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D(8)(x)  # a 2x2 level, split 2x2 ways
    x = keras.layers.Conv2D(8, 3, padding="same")(x)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x))
    spatial_tf.layers.partition_friendly(model, warn=False)

    def step(images):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(images) ** 2)
        return loss, tape.gradient(loss, model.trainable_variables)

    warnings = emulators(4).report(step, args=(tf.ones([2, 16, 16, 4]),)).warnings
    assert warnings, "the 2x2 level is gathered"
    for warning in warnings:
        assert "at this level the convolution's input is 2x2 with a 3x3 window" in warning
        assert "test_remedies.py" in warning  # the user's line, not spatial_tf's


def test_an_activation_shaped_like_a_depthwise_kernel_piece_is_not_called_a_kernel():
    """A running average over frames ([batch, frames, 1, 1, channels]) matches the window
    and channel axes of a depthwise kernel [5, 3, 3, 1, channels]; its op's result is not
    the kernel's shape, so it is no kernel."""
    graph = _graph(lambda x: tf.math.cumsum(x, axis=1), tf.TensorSpec([2, 4, 1, 1, 184]))
    source = op_source.find(graph, _op_named(graph, "Cumsum"))
    kernel = [5, 3, 3, 1, 184]
    assert remedies.is_kernel_piece([2, 4, 1, 1, 184], kernel, 4)
    text = remedies.explain("all-gather", source, 4, shape=[2, 4, 1, 1, 184],
                            variables=[kernel])
    assert text.startswith("a cumulative sum along axis 1"), text
    # where the kernel's shape is made (its gradient), the same piece is the kernel
    graph = _graph(lambda g: g * 2.0, tf.TensorSpec(kernel))
    source = op_source.find(graph, _op_named(graph, "Mul"))
    text = remedies.explain("all-gather", source, 4, shape=[2, 4, 1, 1, 184],
                            variables=[kernel])
    assert text.startswith("this is a convolution's kernel [5, 3, 3, 1, 184]"), text


class _Op:
    """A convolution op as a nested function's gradient names it (no graph needed)."""

    def __init__(self, name, op_type):
        self.name, self.type, self.inputs, self.outputs = name, op_type, [], []

    def get_attr(self, name):
        return [1, 1, 1, 1, 1]


@pytest.mark.parametrize("name,expected", [
    ("PartitionedCall_6/gradients/PartitionedCall_grad/PartitionedCall_2/gradients/"
     "Conv3D_grad/Conv3DBackpropInputV2", "spatial_tf.layers.partition_friendly(model)"),
    ("gradient_tape/net/conv/Conv3DBackpropInputV2", "spatial_tf.layers.partition_friendly"),
    ("net/up/conv3d_transpose", "this transposed convolution's pieces per core"),
], ids=["nested_function_gradient", "tape_gradient", "transposed_convolution"])
def test_an_input_gradient_inside_a_function_is_not_called_transposed(name, expected):
    source = op_source.Source(op=_Op(name, "Conv3DBackpropInputV2"), gradient=False,
                              frame=None)
    assert expected in remedies.explain("all-gather", source, 4)
