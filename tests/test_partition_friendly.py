"""partition_friendly: the same model (weights, keys, results, gradients), a cheaper split."""
import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.layers import Change, partition_friendly
from spatial_tf.partition_friendly import PartitionFriendlyWarning


def _float64(fn):
    """Build Keras layers in float64 (restoring the global settings afterwards)."""
    floatx, policy = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    try:
        return fn()
    finally:
        keras.config.set_floatx(floatx)
        keras.config.set_dtype_policy(policy)


def _loss_and_grads(model, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = model(x, training=True)
        loss = tf.reduce_sum(y * tf.cos(y))  # not symmetric: a sign error shows
    grads = tape.gradient(loss, [x] + model.trainable_variables)
    return y, grads


def _twin(build, shape, seed=0):
    """Two identical float64 models (same weights) and an input."""
    def make():
        keras.utils.set_random_seed(seed)
        return build()
    a, b = _float64(make), _float64(make)
    b.set_weights(a.get_weights())
    x = tf.constant(np.random.default_rng(seed).normal(size=shape))
    return a, b, x


def _assert_same_step(plain, friendly, x, atol=1e-10):
    y0, g0 = _loss_and_grads(plain, x)
    assert y0.dtype == tf.float64 and all(g.dtype == tf.float64 for g in g0)
    traced = tf.function(_loss_and_grads)  # the rewrite also holds in a traced step
    for y1, g1 in (_loss_and_grads(friendly, x), traced(friendly, x)):
        np.testing.assert_allclose(y1.numpy(), y0.numpy(), rtol=0, atol=atol)
        assert len(g1) == len(g0)
        for a, b in zip(g1, g0):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=atol)


def _one_layer_model(make, shape):
    inputs = keras.Input(shape[1:])
    return keras.Model(inputs, make()(inputs))


HANDLED, UNHANDLED = True, False
# each layer kind alone: (constructor, input shape, expected "handled"); every one changes
LAYERS = [
    ("conv2d_same_3x3", lambda: keras.layers.Conv2D(3, 3, padding="same"), (2, 9, 8, 2),
     HANDLED),
    ("conv2d_valid_3x3", lambda: keras.layers.Conv2D(3, 3, padding="valid"), (2, 9, 8, 2),
     HANDLED),
    ("conv2d_same_even_4x2", lambda: keras.layers.Conv2D(3, (4, 2), padding="same"),
     (1, 9, 8, 2), HANDLED),
    ("conv2d_bias_relu", lambda: keras.layers.Conv2D(3, 3, padding="same", activation="relu"),
     (1, 8, 8, 2), HANDLED),
    ("conv3d_same_3", lambda: keras.layers.Conv3D(2, 3, padding="same"), (1, 6, 5, 4, 2),
     HANDLED),
    ("conv3d_valid_2x3x1", lambda: keras.layers.Conv3D(2, (2, 3, 1), padding="valid"),
     (1, 6, 5, 4, 2), HANDLED),
    ("conv2d_stride2", lambda: keras.layers.Conv2D(3, 7, strides=2, padding="same"),
     (1, 16, 16, 3), HANDLED),
    ("conv2d_dilation2", lambda: keras.layers.Conv2D(3, 3, dilation_rate=2, padding="same"),
     (1, 12, 12, 2), HANDLED),
    ("conv2d_1x1", lambda: keras.layers.Conv2D(3, 1), (1, 8, 8, 2), HANDLED),
    ("conv3d_transpose_2_2", lambda: keras.layers.Conv3DTranspose(2, 2, strides=2),
     (1, 4, 4, 4, 2), HANDLED),
    ("conv2d_transpose_3_2", lambda: keras.layers.Conv2DTranspose(2, 3, strides=2,
                                                                   padding="same"),
     (1, 5, 4, 2), UNHANDLED),
    ("separable_conv2d", lambda: keras.layers.SeparableConv2D(3, 3), (1, 6, 7, 2), UNHANDLED),
]


@pytest.mark.parametrize("name,make,shape,handled", LAYERS, ids=[c[0] for c in LAYERS])
def test_each_layer_kind_same_outputs_and_gradients_in_float64(name, make, shape, handled):
    plain, friendly, x = _twin(lambda: _one_layer_model(make, shape), shape)
    changes = partition_friendly(friendly, warn=False)
    assert [(c.changed, c.handled) for c in changes] == [(True, handled)]
    _assert_same_step(plain, friendly, x)


# strided convolutions partition_friendly(space_to_depth=True) sees: (constructor, input
# shape, what it computes after); FOLDED / ORDERED are the Change's "after" texts
FOLDED = ("at stride 1 on its input's patches folded into the channels (space to depth), "
          "its kernel gradient made to wait for its input gradient")
ORDERED = "with its kernel gradient made to wait for its input gradient"
STEMS = [
    ("rgb_stem_2d", lambda: keras.layers.Conv2D(4, 3, strides=2, padding="same"),
     (2, 16, 16, 3), FOLDED),
    ("resnet_stem_7x7", lambda: keras.layers.Conv2D(4, 7, strides=2, padding="same"),
     (1, 16, 16, 3), FOLDED),
    ("movinet_stem_3d", lambda: keras.layers.Conv3D(4, (1, 3, 3), strides=(1, 2, 2),
                                                    padding="same"), (2, 3, 8, 8, 3), FOLDED),
    ("valid_stride3_7_channels", lambda: keras.layers.Conv2D(2, 5, strides=3),
     (1, 12, 15, 7), FOLDED),
    ("odd_size_falls_back", lambda: keras.layers.Conv2D(4, 3, strides=2, padding="same"),
     (1, 15, 16, 3), FOLDED),  # computed as TensorFlow's strided convolution, ordered
    ("8_channels_not_folded", lambda: keras.layers.Conv2D(4, 3, strides=2, padding="same"),
     (1, 16, 16, 8), ORDERED),
    ("dilated_not_folded", lambda: keras.layers.Conv2D(4, 3, dilation_rate=2, padding="same"),
     (1, 16, 16, 3), ORDERED),
]


@pytest.mark.parametrize("name,make,shape,after", STEMS, ids=[c[0] for c in STEMS])
def test_space_to_depth_folds_strided_convolutions_of_few_channels(name, make, shape, after):
    plain, friendly, x = _twin(lambda: _one_layer_model(make, shape), shape)
    [change] = partition_friendly(friendly, warn=False, space_to_depth=True)
    assert change.after == f"{change.before} {after}"
    assert change.handled
    _assert_same_step(plain, friendly, x)


def test_without_space_to_depth_a_stem_is_only_ordered():
    inputs = keras.Input((16, 16, 3))
    model = keras.Model(inputs, keras.layers.Conv2D(4, 3, strides=2, padding="same")(inputs))
    [change] = partition_friendly(model, warn=False)
    assert change.after == f"Conv2D {ORDERED}"
    graph = tf.function(model).get_concrete_function(tf.TensorSpec([1, 16, 16, 3])).graph
    assert [op.get_attr("strides") for op in graph.get_operations()
            if op.type == "Conv2D"] == [[1, 2, 2, 1]]


def _unet(size=8, filters=2):
    """A two-level U-Net as a user writes it: Conv3D, BN, strided conv, transposed conv,
    concatenation."""
    inputs = keras.Input((size, size, size, 1))
    # no bias before batch norm: its gradient is zero up to rounding
    a = keras.layers.Conv3D(filters, 3, padding="same", use_bias=False, name="down")(inputs)
    a = keras.layers.BatchNormalization(name="bn")(a)
    b = keras.layers.Conv3D(filters, 2, strides=2, name="pool")(  # MaxPool3D has no float64
        keras.layers.Activation("relu")(a))
    b = keras.layers.Conv3D(2 * filters, 3, padding="same", name="bottom")(b)
    up = keras.layers.Conv3DTranspose(filters, 2, strides=2, name="up")(b)
    x = keras.layers.Concatenate(name="skip")([up, a])
    x = keras.layers.Conv3D(filters, 3, padding="same", name="merge")(x)
    return keras.Model(inputs, keras.layers.Conv3D(3, 1, name="head")(x), name="unet")


def test_unet_changes_name_each_layer_and_keep_the_step():
    plain, friendly, x = _twin(_unet, (1, 8, 8, 8, 1))
    changes = partition_friendly(friendly)
    assert {c.path: c.changed for c in changes} == {
        "unet/down": True, "unet/bn": False, "unet/pool": True, "unet/bottom": True,
        "unet/up": True,
        "unet/merge": True, "unet/head": True}
    assert all(isinstance(c, Change) and c.handled and c.why for c in changes)
    assert "unet/merge: Conv3D -> Conv3D computing its kernel gradient" in str(changes[5])
    _assert_same_step(plain, friendly, x)


def test_without_the_halo_form_stride_1_convolutions_are_only_ordered():
    plain, friendly, x = _twin(_unet, (1, 8, 8, 8, 1))
    changes = {c.path: c for c in partition_friendly(friendly, halo=False)}
    for path in ("unet/down", "unet/bottom", "unet/merge"):
        assert changes[path].after == f"Conv3D {ORDERED}"
        assert changes[path].why.startswith(
            "halo=False (the default for a TPU target) keeps TensorFlow's kernel gradient")
    assert changes["unet/pool"].after == f"Conv3D {ORDERED}"  # strided: as with the halo form
    _assert_same_step(plain, friendly, x)
    # the merge convolution is one convolution of the concatenation, as Keras computes it
    graph = tf.function(lambda x: friendly(x, training=True)).get_concrete_function(x).graph
    merge = [op for op in graph.get_operations() if "/merge" in op.name and op.type == "Conv3D"]
    assert len(merge) == 1
    assert merge[0].inputs[0].shape.as_list() == [1, 8, 8, 8, 4]  # 2 + 2 channels


@pytest.mark.parametrize("target", ["v5e", "v3-8", "V5litepod-16"])
def test_a_tpu_target_keeps_tensorflows_kernel_gradient_unless_halo_says_otherwise(target):
    _, friendly, _ = _twin(_unet, (1, 8, 8, 8, 1))
    changes = {c.path: c.after for c in partition_friendly(friendly, target=target)}
    assert [changes[p] for p in ("unet/down", "unet/bottom", "unet/merge")] == [
        f"Conv3D {ORDERED}"] * 3
    _, explicit, _ = _twin(_unet, (1, 8, 8, 8, 1))
    changes = {c.path: c.after for c in partition_friendly(explicit, target=target, halo=True)}
    assert changes["unet/down"] == (
        "Conv3D computing its kernel gradient from the output gradient's halo")


def test_inside_a_tpu_strategys_scope_the_default_is_the_tpus():
    halo_form = "Conv3D computing its kernel gradient from the output gradient's halo"
    _, on_emulator, _ = _twin(_unet, (1, 8, 8, 8, 1))
    with spatial_tf.Emulator(2).scope():  # not a TPU: the halo form
        changes = {c.path: c.after for c in partition_friendly(on_emulator)}
    assert changes["unet/down"] == halo_form
    _, on_tpu, _ = _twin(_unet, (1, 8, 8, 8, 1))
    _, explicit, _ = _twin(_unet, (1, 8, 8, 8, 1))
    from test_strategy import real_tpu_strategy  # TensorFlow's own, over a synthetic v3-8

    with real_tpu_strategy().scope():
        changes = {c.path: c.after for c in partition_friendly(on_tpu)}
        assert changes["unet/down"] == f"Conv3D {ORDERED}"
        changes = {c.path: c.after for c in partition_friendly(explicit, halo=True)}
        assert changes["unet/down"] == halo_form


@pytest.mark.parametrize("kwargs, error, words", [
    ({"target": "v9"}, ValueError, "partition_friendly: target: unknown TPU generation 'v9'"),
    ({"target": 5}, TypeError, "partition_friendly: target: TPU name is 5"),
    ({"target": "v3-x"}, ValueError, "partition_friendly: target: TPU slice 'v3-x'"),
    ({"halo": "no"}, TypeError, "partition_friendly: halo is 'no'; expected True, False or None"),
])
def test_a_bad_target_or_halo_is_named_and_changes_nothing(kwargs, error, words):
    _, friendly, _ = _twin(_unet, (1, 8, 8, 8, 1))
    with pytest.raises(error, match="^" + re.escape(words)):
        partition_friendly(friendly, **kwargs)
    # nothing was changed: a call after the failure changes what the first call would
    changed = {c.path for c in partition_friendly(friendly) if c.changed}
    assert changed == {"unet/down", "unet/pool", "unet/bottom", "unet/up", "unet/merge",
                       "unet/head"}  # Keras 3's batch norm is never fused: left as it is


def test_merge_conv_reads_the_concatenated_pieces_not_the_concatenation():
    _, friendly, x = _twin(_unet, (1, 8, 8, 8, 1))
    partition_friendly(friendly)
    graph = tf.function(lambda x: friendly(x, training=True)).get_concrete_function(x).graph
    merge = [op for op in graph.get_operations() if "/merge" in op.name and op.type == "Conv3D"]
    assert len(merge) == 2  # one per piece: the skip connection and the upsampled tensor
    assert "ConcatV2" not in {op.inputs[0].op.type for op in merge}


def test_one_sgd_train_step_gives_the_same_weights():
    plain, friendly, x = _twin(_unet, (1, 8, 8, 8, 1))
    partition_friendly(friendly)
    after = []
    for model in (plain, friendly):
        optimizer = keras.optimizers.SGD(0.1)
        _, grads = _loss_and_grads(model, x)
        optimizer.apply_gradients(zip(grads[1:], model.trainable_variables))
        after.append([w.numpy() for w in model.weights])
    for a, b in zip(*after):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


class _Block(keras.layers.Layer):
    """Layers in an attribute and in a list, as custom blocks keep them."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.first = keras.layers.Conv2D(2, 3, padding="same", name="first")
        self.rest = [keras.layers.Conv2D(2, 3, padding="same", name=f"rest{i}") for i in range(2)]

    def call(self, x):
        x = self.first(x)
        for layer in self.rest:
            x = layer(x)
        return x


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__(name="sub")
        self.block = _Block(name="block")
        self.inner = keras.Sequential([keras.layers.Conv2D(1, 3, padding="same", name="seq_conv")],
                                      name="inner")

    def call(self, x):
        return self.inner(self.block(x))


def test_subclassed_nested_and_attribute_layers_are_reached():
    def build():
        model = _Subclassed()
        model(tf.zeros((1, 8, 8, 1), tf.float64))
        return model

    plain, friendly, x = _twin(build, (1, 8, 8, 1))
    changes = partition_friendly(friendly)
    assert sorted(c.path for c in changes if c.changed) == [
        "sub/block/first", "sub/block/rest0", "sub/block/rest1", "sub/inner/seq_conv"]
    _assert_same_step(plain, friendly, x)


def test_idempotent():
    _, model, x = _twin(_unet, (1, 8, 8, 8, 1))
    first = partition_friendly(model)
    ops = {layer.name: layer.convolution_op for layer in model.layers
           if isinstance(layer, keras.layers.Conv3D)}
    second = partition_friendly(model)
    assert [c.path for c in second] == [c.path for c in first]
    assert not any(c.changed for c in second)
    assert ops == {layer.name: layer.convolution_op for layer in model.layers
                   if isinstance(layer, keras.layers.Conv3D)}


def test_weights_names_and_checkpoints_are_unchanged(tmp_path):
    _, model, x = _twin(_unet, (1, 8, 8, 8, 1))
    names = [w.path for w in model.weights]
    before = tf.train.Checkpoint(model=model).write(str(tmp_path / "before"))
    keys_before = sorted(name for name, _ in tf.train.list_variables(before))
    original = [w.numpy() for w in model.weights]
    partition_friendly(model)
    assert [w.path for w in model.weights] == names
    after = tf.train.Checkpoint(model=model).write(str(tmp_path / "after"))
    assert sorted(name for name, _ in tf.train.list_variables(after)) == keys_before
    for w in model.weights:  # a checkpoint from before the call restores after it
        w.assign(tf.zeros_like(w))
    tf.train.Checkpoint(model=model).read(before).assert_consumed()
    for w, value in zip(model.weights, original):
        np.testing.assert_array_equal(w.numpy(), value)
    fresh = _float64(_unet)  # and one written after restores into an unchanged model
    tf.train.Checkpoint(model=fresh).read(after).assert_consumed()
    for w, value in zip(fresh.weights, original):
        np.testing.assert_array_equal(w.numpy(), value)


def test_keras_file_saves_and_loads(tmp_path):
    _, model, x = _twin(_unet, (1, 8, 8, 8, 1))
    partition_friendly(model)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=0, atol=1e-12)
    assert any(c.changed for c in partition_friendly(loaded))  # a loaded model: call it again


class _CustomConv(keras.layers.Conv2D):
    def convolution_op(self, inputs, kernel):
        return super().convolution_op(inputs, kernel * 2.0)


def test_layers_it_cannot_handle_are_named_and_only_ordered():
    inputs = keras.Input((8, 8, 2))
    x = _CustomConv(2, 3, padding="same", name="custom")(inputs)
    x = keras.layers.SeparableConv2D(2, 3, padding="same", name="separable")(x)
    x = keras.layers.Conv2D(2, 3, padding="same", data_format="channels_first",
                            name="first")(x)
    model = keras.Model(inputs, x, name="m")
    custom_op = model.get_layer("custom").convolution_op
    with pytest.warns(PartitionFriendlyWarning) as record:
        changes = partition_friendly(model)
    assert [(c.path, c.after, c.handled) for c in changes] == [
        (f"m/{name}", f"{kind} with its weight gradients made to wait for its input gradient",
         False) for name, kind in (("custom", "_CustomConv"), ("separable", "SeparableConv2D"),
                                   ("first", "Conv2D"))]
    assert len(record) == 1
    message = str(record[0].message)
    # one warning that says what cannot be told without a step and where to look
    assert message.startswith("partition_friendly: 3 layers (_CustomConv, SeparableConv2D, "
                              "Conv2D; the first m/custom) keep TensorFlow's own gradient")
    assert "which the model alone does not tell" in message
    assert "spatial_tf.Emulator(...).report(step, args) names each layer" in message
    # the full list, each with its reason, is in the return value
    whys = [c.why for c in changes]
    assert whys[0].startswith("its class overrides convolution_op")
    assert whys[1].startswith("transposed and separable convolutions")
    assert whys[2].startswith("channels_first")
    assert model.get_layer("custom").convolution_op == custom_op
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        partition_friendly(model, warn=False)


@pytest.mark.parametrize("make", [lambda: _CustomConv(3, 3, padding="same"),
                                  lambda: keras.layers.SeparableConv2D(4, 3, padding="same")],
                         ids=["custom_convolution_op", "separable"])
def test_a_layer_it_can_only_order_keeps_its_step_in_float64(make):
    def build():
        inputs = keras.Input((7, 6, 2))
        return keras.Model(inputs, make()(inputs))

    plain, friendly, x = _twin(build, (2, 7, 6, 2))
    [change] = partition_friendly(friendly, warn=False)
    assert (change.changed, change.handled) == (True, False)
    _assert_same_step(plain, friendly, x)


def test_channels_first_is_only_ordered():
    layer = keras.layers.Conv2D(2, 3, padding="same", data_format="channels_first", name="cf")
    layer.build((1, 2, 8, 8))
    [change] = partition_friendly(layer, warn=False)
    assert (change.changed, change.handled) == (True, False)
    assert "channels_first" in change.why


def test_not_a_model():
    with pytest.raises(TypeError, match=r"partition_friendly: got list; expected a built "
                                        r"Keras or tf_keras model"):
        partition_friendly([keras.layers.Conv2D(2, 3)])


def test_an_unbuilt_layer_fails_and_nothing_is_changed():
    built = keras.layers.Conv2D(2, 3, padding="same", name="built")
    built.build((1, 8, 8, 1))
    unbuilt = keras.layers.Conv2D(2, 3, padding="same", name="later")
    model = keras.Sequential([built, unbuilt], name="seq")
    op = built.convolution_op
    with pytest.raises(ValueError, match=r"layer seq/later \(Conv2D\) is not built yet.*nothing "
                                         r"was changed. Fix: build the model first"):
        partition_friendly(model)
    assert built.convolution_op == op
    assert not getattr(built, "_spatial_tf_partition_friendly", False)


@pytest.mark.emulator
def test_split_step_costs_less_and_equals_the_unsplit_one_on_the_emulator():
    """A 2x2x2-split step of the user's U-Net: less temp per core, same float64 results."""
    temps, losses = {}, {}
    x = tf.constant(np.random.default_rng(0).normal(size=(1, 16, 16, 16, 1)), tf.float32)
    for form in ("as written", "friendly"):
        emulator = spatial_tf.Emulator(8)
        with emulator.scope():
            keras.utils.set_random_seed(0)
            model = _unet(16, filters=4)
        if form == "friendly":
            partition_friendly(model)

        def step(x):
            x = spatial_tf.split(x, [1, 2, 2, 2, 1])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            return loss, grads

        temps[form] = emulator.report(step, args=(x,)).partitioned["temp"]
        comparison = emulator.compare(step, args=(x,))
        assert comparison.ok, str(comparison)
    # 0.955 measured: this step updates no kernel, so the halo form's kernel-update order
    # (halo_conv._after) frees no copy here and costs a little; without it, below 0.95
    assert temps["friendly"] < 0.97 * temps["as written"], temps


def _sharding_types(graph):
    """The sharding type (REPLICATED, OTHER, ...) of every XlaSharding op in ``graph``."""
    from spatial_tf._tf_internals import xla_data_pb2

    return [xla_data_pb2.OpSharding.Type.Name(
                xla_data_pb2.OpSharding.FromString(op.get_attr("sharding")).type)
            for op in graph.get_operations() if op.type == "XlaSharding"]


@pytest.mark.parametrize("call", ["apply_gradients", "apply"])
def test_the_optimizer_keeps_gradients_whole_and_updates_the_same(call):
    """partition_friendly(model, optimizer=...): each gradient annotated whole before the
    update (fit calls optimizer.apply, custom steps apply_gradients); same weights."""
    plain, friendly, x = _twin(_unet, (1, 8, 8, 8, 1))
    optimizers = [keras.optimizers.SGD(0.01, momentum=0.9) for _ in range(2)]
    changes = partition_friendly(friendly, optimizer=optimizers[1])
    assert [c.after for c in changes if c.path.startswith("optimizer/")] == [
        "SGD annotating each gradient whole on every core before its update"]
    for model, optimizer in zip((plain, friendly), optimizers):
        optimizer.build(model.trainable_variables)

        @tf.function
        def step(x, model=model, optimizer=optimizer):
            _, grads = _loss_and_grads(model, x)
            if call == "apply":
                optimizer.apply(grads[1:], model.trainable_variables)
            else:
                optimizer.apply_gradients(zip(grads[1:], model.trainable_variables))

        for _ in range(2):  # the second update reads the momentum of the first
            step(x)
        graph = step.get_concrete_function(x).graph
        types = _sharding_types(graph)
        if model is plain:
            assert types == []
        else:
            assert types == ["REPLICATED"] * len(model.trainable_variables)
    for a, b in zip(plain.weights, friendly.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def test_the_optimizer_is_changed_once_and_a_non_optimizer_changes_nothing():
    _, model, _ = _twin(_unet, (1, 8, 8, 8, 1))
    optimizer = keras.optimizers.Adam()
    with pytest.raises(TypeError, match=r"keep_gradients_whole: got object, which has no "
                                        r"apply_gradients.*Fix: pass the optimizer"):
        partition_friendly(model, optimizer=object())
    assert not any(getattr(layer, "_spatial_tf_partition_friendly", False)
                   for layer in model.layers)  # the model was left as it was
    first = spatial_tf.layers.keep_gradients_whole(optimizer)
    apply = optimizer.apply
    second = partition_friendly(model, optimizer=optimizer)
    assert first.changed and not second[0].changed
    assert second[0].path == f"optimizer/{optimizer.name}"
    assert optimizer.apply is apply


def _regularized():
    """Convolutions and a dense layer with weight regularizers, as Model Garden's carry."""
    inputs = keras.Input((8, 8, 2))
    x = keras.layers.Conv2D(3, 3, padding="same", kernel_regularizer=keras.regularizers.L2(0.1),
                            bias_regularizer="l1", name="conv")(inputs)
    x = keras.layers.Conv2D(3, 3, strides=2, kernel_regularizer="l2", name="down")(x)
    x = keras.layers.Dense(2, kernel_regularizer=keras.regularizers.L1L2(0.01, 0.02),
                           name="dense")(x)
    return keras.Model(inputs, x, name="reg")


def _total_loss_and_grads(model, x):
    with tf.GradientTape() as tape:
        y = model(x, training=True)
        loss = tf.reduce_sum(y * tf.cos(y)) + tf.add_n(model.losses)
    return loss, tape.gradient(loss, model.trainable_variables)


def test_weight_regularizers_are_ordered_with_the_same_loss_and_gradients():
    plain, friendly, x = _twin(_regularized, (2, 8, 8, 2))
    changes = partition_friendly(friendly)
    assert [(c.path, c.before, c.changed) for c in changes if "regularizer" in c.before] == [
        ("reg/conv", "kernel, bias regularizers", True),
        ("reg/down", "kernel regularizer", True),
        ("reg/dense", "kernel regularizer", True)]
    assert len(friendly.losses) == len(plain.losses) == 4
    l0, g0 = _total_loss_and_grads(plain, x)
    for l1, g1 in (_total_loss_and_grads(friendly, x),
                   tf.function(_total_loss_and_grads)(friendly, x)):
        np.testing.assert_allclose(l1.numpy(), l0.numpy(), rtol=1e-13)
        for a, b in zip(g1, g0):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)
    assert not any(c.changed for c in partition_friendly(friendly))  # idempotent
    assert friendly.get_layer("conv").kernel_regularizer.get_config() == {"l2": 0.1}


@pytest.mark.emulator
def test_ordered_regularizers_free_a_kernel_copy_in_a_split_update(monkeypatch):
    """Without the order, XLA keeps a copy of a regularized kernel for the regularizer's
    read: at least the first kernel's bytes (3x3x3x4x32 float32, 13,824)."""
    from spatial_tf import partition_friendly as module

    def temp():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((8, 8, 8, 4))
        x = inputs
        for filters in (32, 32):
            x = keras.layers.Conv3D(filters, 3, padding="same", kernel_regularizer="l2")(x)
        model = keras.Model(inputs, x)
        partition_friendly(model)
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)

        def step(image):
            image = spatial_tf.split(image, [1, 2, 1, 1, 1])
            loss, grads = _total_loss_and_grads(model, image)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        image = np.random.default_rng(0).normal(size=(1, 8, 8, 8, 4)).astype("float32")
        return spatial_tf.Emulator(2).compile(step, args=(image,)).memory()["temp"]

    ordered = temp()
    monkeypatch.setattr(module, "ordered_regularizer", lambda regularizer: regularizer)
    unordered = temp()
    assert unordered - ordered >= 3 * 3 * 3 * 4 * 32 * 4, (ordered, unordered)


@pytest.mark.emulator
def test_a_step_reported_before_partition_friendly_is_traced_again_after_it():
    """report, partition_friendly(model), report the same step function again: the second
    report is of the changed model, not the program cached before."""
    from spatial_tf.emulator import Emulator

    inputs = keras.Input((32, 32, 4))
    x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    model = keras.Model(inputs, keras.layers.Conv2D(8, 3, padding="same")(x))
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)

    def step(x):
        x = spatial_tf.split(x, [1, 4, 1, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        optimizer.apply(tape.gradient(loss, model.trainable_variables),
                        model.trainable_variables)
        return loss

    emulator = Emulator(4)
    batch = (tf.ones([2, 32, 32, 4]),)
    before = emulator.compile(step, batch)
    assert emulator.compile(step, batch) is before  # cached while nothing changed
    ops_before = {op.type for op in before.traced.graph.get_operations()}
    spatial_tf.layers.partition_friendly(model)
    after = emulator.compile(step, batch)
    assert after is not before
    ops_after = {op.type for op in after.traced.graph.get_operations()}
    assert "Max" in ops_after - ops_before  # the ordered update's dependency, new in the trace
    assert emulator.report(step, batch).partitioned == after.memory()
