"""Model Garden's spatial-partitioning path, unchanged, on the emulator.

The volumetric 3D U-Net experiment ``seg_unet3d_test`` runs through
``official.core.train_lib.run_experiment`` exactly as
``official/vision/train_spatial_partitioning.py`` runs it (task built inside
``strategy.scope()``, the task's own TFRecord input, Dice loss and optimizer config), with
only ``TPUStrategy`` swapped for ``spatial_tf.Emulator``. It needs tf-models-official,
which pins TensorFlow 2.20, so it runs in its own virtual environment (``.ci/run``; the
docs/development.md shows how); elsewhere the whole file is skipped.
"""
import glob
import os

import pytest

pytest.importorskip(
    "official.projects.volumetric_models",
    reason="Model Garden (tf-models-official) is not installed: tests/integration runs in "
    "its own environment, see .ci/run",
)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from official.core import exp_factory, task_factory, train_lib  # noqa: E402
from official.projects.volumetric_models import registry_imports  # noqa: E402,F401

import spatial_tf  # noqa: E402
from spatial_tf.emulator.xla.hlo_text import collectives  # noqa: E402

SIZE = 32  # the volume side, as in the experiment's own test config
CHANNELS = CLASSES = 2
BATCH = 2
STEPS = 3
OPTIMIZERS = {
    "sgd_momentum": {"type": "sgd", "sgd": {"momentum": 0.9}},
    "adam": {"type": "adam"},
}


def _example(rng):
    """One tf.Example as the task's decoder reads it: raw float32 image and one-hot label."""
    image = rng.standard_normal((SIZE, SIZE, SIZE, CHANNELS)).astype(np.float32)
    label = np.eye(CLASSES, dtype=np.float32)[(image[..., 0] > 0.5).astype(np.int64)]
    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
        "image/class/label": tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[label.tobytes()])
        ),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """``{"train": path, "val": path}``: small TFRecord files in the task's format."""
    root = tmp_path_factory.mktemp("model_garden_data")
    paths = {}
    for split, (n, seed) in {"train": (4, 0), "val": (4, 1)}.items():
        rng = np.random.default_rng(seed)
        paths[split] = str(root / f"{split}.tfrecord")
        with tf.io.TFRecordWriter(paths[split]) as w:
            for _ in range(n):
                w.write(_example(rng))
    return paths


@pytest.fixture(scope="module")
def init_checkpoint(data, tmp_path_factory):
    """Initial weights for the parity test's runs (the task's ``init_checkpoint``):
    ``(path, [every weight of the model as a NumPy array, in model.weights order])``."""
    task = task_factory.get_task(_params(data, [], "sgd_momentum").task)
    tf_keras.utils.set_random_seed(1)
    model = task.build_model()
    path = str(tmp_path_factory.mktemp("model_garden_init") / "init")
    return (tf.train.Checkpoint(**model.checkpoint_items).write(path),
            [w.numpy() for w in model.weights])


def _params(data, dims, optimizer, init_checkpoint=None):
    """``seg_unet3d_test`` shrunk (base_filters 4), with ``dims`` as its partition dims.

    The data keep the task's defaults (``drop_remainder=False``, shuffling); only the
    shuffle seed is fixed, so that two runs see the same batches.
    """
    params = exp_factory.get_exp_config("seg_unet3d_test")
    size = [SIZE] * 3
    data_config = {"input_size": size, "num_channels": CHANNELS, "num_classes": CLASSES,
                   "global_batch_size": BATCH}
    params.override({
        "task": {
            "model": {"input_size": size, "num_channels": CHANNELS, "num_classes": CLASSES,
                      "backbone": {"unet_3d": {"base_filters": 4}}},
            "train_data": dict(data_config, input_path=data["train"], seed=7),
            "validation_data": dict(data_config, input_path=data["val"]),
            "train_input_partition_dims": list(dims),
            "eval_input_partition_dims": list(dims),
            "init_checkpoint": init_checkpoint,
        },
        "trainer": {
            "train_steps": STEPS, "steps_per_loop": STEPS, "summary_interval": STEPS,
            "checkpoint_interval": STEPS, "validation_interval": STEPS,
            "validation_steps": 2,
            "optimizer_config": {
                "optimizer": OPTIMIZERS[optimizer],
                "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.01}},
            },
        },
    }, is_strict=True)
    params.validate()
    params.lock()
    assert params.task.train_data.drop_remainder is False  # batch size unknown when traced
    return params


def _run(strategy, params, mode, model_dir):
    """What ``train_spatial_partitioning.main`` does once it has its strategy."""
    with strategy.scope():
        task = task_factory.get_task(params.task, logging_dir=model_dir)
    model, _ = train_lib.run_experiment(
        distribution_strategy=strategy, task=task, mode=mode, params=params,
        model_dir=model_dir,
    )
    return model


def _scalars(log_dir, tag):
    """``{step: value}`` of one scalar summary written under ``log_dir``."""
    found = {}
    for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    found[event.step] = float(tf.make_ndarray(value.tensor))
    return found


def _checkpoint(model_dir):
    """The latest checkpoint's path and its optimizer step count."""
    path = tf.train.latest_checkpoint(model_dir)
    assert path is not None, f"no checkpoint in {model_dir}: {os.listdir(model_dir)}"
    names = [n for n, _ in tf.train.list_variables(path) if n.endswith("iter/.ATTRIBUTES/VARIABLE_VALUE")]
    assert len(names) == 1, names
    return path, int(tf.train.load_variable(path, names[0]))


def _compiled_steps(emulator, model):
    """``(train, eval)``: the steps the emulator compiled, each checked to be split over
    its cores; train steps are those that write every trainable weight of ``model``."""
    trainable = {id(v.handle) for v in model.trainable_variables}
    train, evaluation = [], []
    for s in emulator.compiled_steps:
        assert s.traced.name == "step_fn"  # the name Model Garden's trainer gives them
        assert s.program.num_partitions == emulator.num_cores_per_replica
        kinds = {c.kind for c in collectives(s.program.compiled.hlo_text())}
        # convolutions over a split axis exchange halos between neighbouring cores
        assert "collective-permute" in kinds, sorted(kinds)
        written = trainable & {id(v.handle) for v in s.traced.written_variables}
        assert written in (trainable, set()), "a step that writes only some weights"
        (train if written else evaluation).append(s)
    return train, evaluation


def _check_job(emulator, model, model_dir, mode):
    """A finished job's outcomes: checkpoint at the last step, a finite Dice loss in
    the train (and validation) summaries, and the steps compiled partitioned."""
    path, iterations = _checkpoint(model_dir)
    assert os.path.basename(path) == f"ckpt-{STEPS}" and iterations == STEPS
    losses = _scalars(os.path.join(model_dir, "train"), "training_loss")
    assert list(losses) == [STEPS] and 0.0 < losses[STEPS] < 1.0  # a Dice loss
    train, evaluation = _compiled_steps(emulator, model)
    assert len(train) == 1
    if mode == "train":
        assert evaluation == []
    else:
        assert len(evaluation) == 1
        val = _scalars(os.path.join(model_dir, "validation"), "validation_loss")
        assert list(val) == [STEPS] and 0.0 < val[STEPS] < 1.0
    return losses[STEPS]


@pytest.mark.slow
def test_train_on_two_cores_matches_the_default_strategy(data, init_checkpoint, tmp_path):
    """``train`` with SGD with momentum, [1, 2, 1, 1, 1] on 2 cores, against the same
    job (same initial weights, same batches) on TensorFlow's default strategy."""
    path, initial = init_checkpoint
    emulator = spatial_tf.Emulator(num_cores_per_replica=2)
    runs = {}
    for name, strategy, dims in [
        ("default", tf.distribute.get_strategy(), []),
        ("emulator", emulator, [1, 2, 1, 1, 1]),
    ]:
        model_dir = str(tmp_path / name)
        params = _params(data, dims, "sgd_momentum", init_checkpoint=path)
        model = _run(strategy, params, "train", model_dir)
        runs[name] = (model_dir, [w.numpy() for w in model.weights], model)

    loss = _check_job(emulator, runs["emulator"][2], runs["emulator"][0], "train")
    ref_loss = _scalars(os.path.join(runs["default"][0], "train"), "training_loss")[STEPS]
    np.testing.assert_allclose(loss, ref_loss, rtol=5e-5)  # float32: XLA vs oneDNN sums
    weights, ref_weights = runs["emulator"][1], runs["default"][1]
    assert [w.shape for w in weights] == [w.shape for w in ref_weights] == [
        w.shape for w in initial]
    for i, (w, ref) in enumerate(zip(weights, ref_weights)):
        np.testing.assert_allclose(w, ref, rtol=1e-4, atol=1e-5, err_msg=f"weight {i}")
    # the comparison is not vacuous: training moved the weights well beyond that tolerance
    moved = max(float(np.max(np.abs(w - w0))) for w, w0 in zip(ref_weights, initial))
    assert moved > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("mode, cores, replicas, optimizer", [
    pytest.param("train_and_eval", 4, 1, "adam", id="train_and_eval-4cores-adam"),
    pytest.param("train_and_eval", 2, 2, "sgd_momentum",
                 id="train_and_eval-2replicas_x_2cores-sgd_momentum"),
])
def test_run_experiment_trains_partitioned_on_the_emulator(
        data, tmp_path, mode, cores, replicas, optimizer):
    emulator = spatial_tf.Emulator(num_cores_per_replica=cores, num_replicas=replicas)
    model_dir = str(tmp_path / "model")
    model = _run(emulator, _params(data, [1, cores, 1, 1, 1], optimizer), mode, model_dir)
    _check_job(emulator, model, model_dir, mode)


@pytest.mark.parametrize("dims, product", [
    pytest.param([1, 3, 1, 1, 1], 3, id="3-way-split-on-2-cores"),
    pytest.param([1, 2, 2, 1, 1], 4, id="4-way-split-on-2-cores"),
])
def test_partition_dims_that_do_not_match_the_cores_fail_before_any_step(
        data, tmp_path, dims, product):
    emulator = spatial_tf.Emulator(num_cores_per_replica=2)
    model_dir = str(tmp_path / "model")
    expected = (
        f"experimental_split_to_logical_devices: the product of partition_dimensions="
        f"{dims} is {product}; expected num_cores_per_replica=2, as TPUStrategy requires "
        f"(the tensor has shape (None, {SIZE}, {SIZE}, {SIZE}, {CHANNELS})). Fix: partition "
        f"dimensions whose product is 2, e.g. [1, 2, 1, 1, 1] (in Model Garden: "
        f"task.train_input_partition_dims and eval_input_partition_dims),"
    )
    with pytest.raises(ValueError) as error:
        _run(emulator, _params(data, dims, "sgd_momentum"), "train", model_dir)
    # TensorFlow puts the traced function's stack before the message: its last line
    message = str(error.value).splitlines()[-1].strip().removeprefix("ValueError: ")
    assert message.startswith(expected), message
    assert ("num_cores_per_replica=4" in message) == (product == 4)
    # raised while the first step was traced: nothing compiled, run or written
    assert emulator.compiled_steps == ()
    assert tf.train.latest_checkpoint(model_dir) is None
    assert _scalars(os.path.join(model_dir, "train"), "training_loss") == {}
