"""Tilings XLA propagates that do not divide an array (a 3-wide kernel axis split 2 ways):
pieces are reassembled, and parameters jax cannot place are compiled whole."""
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.xla import _xla


def _sharding(text):
    xc = _xla._load().xla_client
    return xc.HloSharding.from_string(text)


def _pieces(whole, counts, order):
    """Padded pieces as XLA gives them, indexed by device ordinal (``order``: tile -> device)."""
    tile = [-(-s // c) for s, c in zip(whole.shape, counts)]
    padded = np.zeros([t * c for t, c in zip(tile, counts)], whole.dtype)
    padded[tuple(slice(0, s) for s in whole.shape)] = whole
    pieces = [None] * len(order)
    for position, index in enumerate(np.ndindex(*counts)):
        pieces[order[position]] = padded[tuple(slice(i * t, (i + 1) * t) for i, t in zip(index, tile))]
    return pieces


@pytest.mark.parametrize("shape, text, counts, order", [
    ((3, 3, 2, 2), "{devices=[2,2,1,1]0,1,2,3}", (2, 2, 1, 1), [0, 1, 2, 3]),   # uneven
    ((4, 6), "{devices=[2,2]0,1,2,3}", (2, 2), [0, 1, 2, 3]),                  # even
    ((5, 6), "{devices=[2,2]3,1,0,2}", (2, 2), [3, 1, 0, 2]),                  # device order
    ((7,), "{devices=[4]0,1,2,3}", (4,), [0, 1, 2, 3]),                        # last piece padding only
])
def test_assemble_undoes_tiling(shape, text, counts, order):
    whole = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1
    assembled = _xla.assemble(_pieces(whole, counts, order), _sharding(text), shape)
    np.testing.assert_array_equal(assembled, whole)
    assert assembled.dtype == np.float32


def test_assemble_with_replicated_subgroup_takes_the_first_copy():
    whole = np.arange(12, dtype=np.int32).reshape(4, 3)
    halves = _pieces(whole, (2, 1), [0, 1])
    # rows 0-1 on devices 0 and 2, rows 2-3 on devices 1 and 3; the copies on 2 and 3 are
    # made to differ so that taking them would show
    pieces = [halves[0], halves[1], np.full_like(halves[0], -1), np.full_like(halves[1], -1)]
    sharding = _sharding("{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}")
    np.testing.assert_array_equal(_xla.assemble(pieces, sharding, (4, 3)), whole)


@pytest.mark.parametrize("text, dims, expected", [
    ("{devices=[2,2,1,1]0,1,2,3}", [3, 3, 8, 8], False),
    ("{devices=[2,2,1,1]0,1,2,3}", [4, 2, 8, 8], True),
    ("{devices=[1,4]0,1,2,3}", [3, 8], True),
    ("{devices=[1,4]0,1,2,3}", [3, 6], False),
    ("{replicated}", [3, 3], True),
    ("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", [4, 3], True),
    ("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", [5, 3], False),
])
def test_divides(text, dims, expected):
    assert _xla.divides(_sharding(text), dims) is expected


def test_entry_dimensions_flattens_nested_results():
    def step(x, y):
        return (x * 2, (tf.reduce_sum(y), y[:1]))

    jit = tf.function(step, jit_compile=True)
    specs = (tf.TensorSpec([3, 4]), tf.TensorSpec([5, 2]))
    hlo = jit.experimental_get_compiler_ir(*specs)(stage="hlo_serialized")
    parameters, results = _xla.entry_dimensions(hlo)
    assert parameters == [[3, 4], [5, 2]]
    assert results == [[3, 4], [], [1, 2]]


@pytest.mark.slow
def test_detector_step_with_an_uneven_weight_gradient_runs():
    # a 64x64 RetinaNet split [1,2,2,1]: XLA tiles a 3x3 kernel's gradient 2x2 (uneven);
    # without the recompile jax refused to place it (IndivisibleError)
    import keras

    from spatial_tf import data, detection
    from spatial_tf.detection.losses import detection_loss
    from spatial_tf.detection.matching import match

    emulator = spatial_tf.Emulator(num_cores_per_replica=4)
    spec = [[1, 2, 2, 1], {"boxes": None, "classes": None}]
    with emulator.scope():
        keras.utils.set_random_seed(0)
        model = spatial_tf.models.retinanet((64, 64, 3), num_classes=3)
        optimizer = keras.optimizers.SGD(0.01)
    grids = detection.AnchorConfig().grids((64, 64))

    def step(batch):
        image, labels = spatial_tf.split(batch, spec)
        with tf.GradientTape() as tape:
            out = model(image, training=True)
            loss = detection_loss(out["class_logits"], out["box_deltas"], match(grids, labels),
                                  3)["loss"]
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    batch = next(iter(data.synthetic_detection_dataset(64, num_images=1, max_boxes=4).batch(1)))
    before = [w.numpy() for w in model.trainable_variables]
    expected = float(step(batch))  # TensorFlow, unpartitioned (split is an identity here)
    for w, b in zip(model.trainable_variables, before):
        w.assign(b)
    loss = float(emulator.run(step, args=(batch,)))
    assert loss == pytest.approx(expected, rel=1e-4)
    changed = [not np.array_equal(w.numpy(), b) for w, b in zip(model.trainable_variables, before)]
    assert sum(changed) > len(changed) // 2
    # the weights and optimizer slots stay whole on every core, as TPUStrategy keeps its
    # variables: XLA tiled the kernel's gradient, never the variable
    program = emulator.compiled_steps[-1].program
    pieces, arguments = program.compiled.parameter_pieces(), len(program.traced.arg_specs)
    assert len(program.traced.variables) > 50
    assert pieces[arguments:] == [1] * len(program.traced.captures)
    assert pieces[0] == 4  # the image, split 2x2
