"""train(): progress, summaries, checkpoints every N steps, resume with the data position."""
import glob
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from spatial_tf import data, train
from spatial_tf.models import unet3d


def _setup():
    keras.utils.set_random_seed(0)
    model = unet3d((8, 8, 8, 1), num_classes=3, depth=2, base_filters=2)
    optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
    # 6 different volumes: resuming at the wrong data position changes the weights
    dataset = data.synthetic_ct_dataset((8, 8, 8), num_volumes=6).repeat().batch(1)
    return model, optimizer, dataset


def test_resume_equals_uninterrupted(tmp_path):
    model, optimizer, dataset = _setup()
    full = train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=5,
                       model_dir=tmp_path / "full",
                       options=train.TrainOptions(checkpoint_every=2, progress=False))
    assert full["step"] == 5
    names = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "full" / "ckpt-*.index")))
    assert names == ["ckpt-2.index", "ckpt-4.index", "ckpt-5.index"]  # every 2 steps and the end
    expected = [w.numpy() for w in model.weights]

    model, optimizer, dataset = _setup()
    first = train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=3,
                        model_dir=tmp_path / "resumed",
                        options=train.TrainOptions(checkpoint_every=2, progress=False))
    assert first["step"] == 3
    model, optimizer, dataset = _setup()  # a new process would start like this
    last = train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=5,
                       model_dir=tmp_path / "resumed",
                       options=train.TrainOptions(checkpoint_every=2, progress=False))
    assert last["step"] == 5 and last["loss"] == pytest.approx(full["loss"], rel=1e-5)
    for a, b in zip(model.weights, expected):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-5, atol=1e-6)
    assert glob.glob(str(tmp_path / "resumed" / "train" / "events.out.tfevents.*"))


def test_mirrored_strategy(tmp_path, virtual_cpus):
    strategy = tf.distribute.MirroredStrategy(
        virtual_cpus[:2], cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
        model, optimizer, _ = _setup()
    dist = data.distribute(strategy, lambda c: data.synthetic_ct_dataset((8, 8, 8), num_volumes=4).repeat(),
                           global_batch_size=2, spec=[[1, 2, 1, 1, 1], [1, 2, 1, 1]])
    out = train.train(strategy, model, optimizer, dist, steps=2, model_dir=tmp_path,
                      spec=[[1, 2, 1, 1, 1], [1, 2, 1, 1]],
                      options=train.TrainOptions(checkpoint_every=1, progress=False))
    assert out["step"] == 2 and np.isfinite(out["loss"]) and 0 <= out["dice"] <= 1
    assert os.path.basename(tf.train.latest_checkpoint(str(tmp_path))) == "ckpt-2"
    again = train.train(strategy, model, optimizer, dist, steps=3, model_dir=tmp_path,
                        spec=[[1, 2, 1, 1, 1], [1, 2, 1, 1]],
                        options=train.TrainOptions(progress=False))
    assert again["step"] == 3  # resumed at 2: one more step
    assert os.path.basename(tf.train.latest_checkpoint(str(tmp_path))) == "ckpt-3"


@pytest.mark.slow
def test_emulator(tmp_path):
    import spatial_tf

    emulator = spatial_tf.Emulator(num_cores_per_replica=8)
    with emulator.scope():
        model, optimizer, _ = _setup()
    spec = [[1, 2, 2, 2, 1], [1, 2, 2, 2]]
    dist = data.distribute(emulator, lambda c: data.synthetic_ct_dataset((8, 8, 8), num_volumes=4).repeat(),
                           global_batch_size=2, spec=spec)
    out = train.train(emulator, model, optimizer, dist, steps=2, model_dir=tmp_path,
                      spec=spec,
                      options=train.TrainOptions(checkpoint_every=1, progress=False))
    assert out["step"] == 2 and np.isfinite(out["loss"])
    again = train.train(emulator, model, optimizer, dist, steps=3, model_dir=tmp_path,
                        spec=spec, options=train.TrainOptions(progress=False))
    assert again["step"] == 3
    # the checkpoint written partitioned restores unpartitioned, weights identical
    plain_model, plain_optimizer, _ = _setup()
    plain_optimizer.build(plain_model.trainable_variables)
    assert train.Checkpointer(tmp_path, model=plain_model, optimizer=plain_optimizer).restore() == 3
    for a, b in zip(plain_model.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_bad_steps(tmp_path):
    model, optimizer, dataset = _setup()
    for steps in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match=rf"train: steps is {steps!r}; expected a positive int"):
            train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=steps,
                        model_dir=tmp_path)
    assert os.listdir(tmp_path) == []  # refused before anything was written


@pytest.mark.parametrize("field, value, error, message", [
    ("checkpoint_every", 0, ValueError,
     r"TrainOptions: checkpoint_every is 0; expected a positive int \(steps between "
     r"checkpoints\)\. Fix: checkpoint_every=100, the default\."),
    ("max_to_keep", True, ValueError, r"max_to_keep is True; expected a positive int"),
    ("max_to_keep", 1.5, ValueError, r"max_to_keep is 1.5; expected a positive int"),
    ("loss_fn", 3.0, TypeError, r"loss_fn is 3.0, which is not callable"),
    ("loss_fn", None, TypeError, r"loss_fn is None, which is not callable"),
    ("step_fn", "step", TypeError, r"step_fn is 'step', which is not callable"),
    ("stop", False, TypeError, r"stop is False, which is not callable"),
    ("progress", 0, TypeError, r"progress is 0; expected True or False"),
    ("log_every", 0, ValueError,
     r"TrainOptions: log_every is 0; expected a positive int \(steps between the lines said "
     r"without a progress bar; None: a tenth of steps\)\. Fix: log_every=None, the default\."),
])
def test_bad_options(field, value, error, message):
    with pytest.raises(error, match=message):
        train.TrainOptions(**{field: value})


def test_earlier_keywords_still_work_and_say_where_they_moved(tmp_path):
    model, optimizer, dataset = _setup()
    with pytest.warns(DeprecationWarning) as caught:
        out = train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=2,
                          model_dir=tmp_path, checkpoint_every=1, progress=False)
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        "train(..., checkpoint_every=1, progress=False) is deprecated; pass "
        "options=TrainOptions(checkpoint_every=1, progress=False)."]
    assert out["step"] == 2  # and checkpoint_every=1 took effect: a checkpoint per step
    names = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "ckpt-*.index")))
    assert names == ["ckpt-1.index", "ckpt-2.index"]
    with pytest.raises(TypeError, match=r"train: 1 unexpected keyword argument epochs; "
                                        r"expected those of TrainOptions \("):
        train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=2,
                    model_dir=tmp_path, epochs=3)


def test_custom_step_fn_values_reach_result_summaries_and_bar(tmp_path, capsys):
    model, optimizer, dataset = _setup()
    calls = []

    def step_fn(batch):
        image, labels = batch
        with tf.GradientTape() as tape:
            logits = model(image, training=True)
            loss = tf.reduce_mean(tf.square(logits))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        calls.append(1)  # traced once
        return {"box_loss": loss, "recall": tf.constant(0.25)}

    out = train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=2,
                      model_dir=tmp_path,
                      options=train.TrainOptions(step_fn=step_fn, progress=True))
    assert sorted(out) == ["box_loss", "recall", "step"] and out["step"] == 2
    assert out["recall"] == 0.25 and np.isfinite(out["box_loss"]) and len(calls) == 1
    assert "recall=0.250" in capsys.readouterr().err
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "train"), size_guidance={"tensors": 0}).Reload()
    assert sorted(events.Tags()["tensors"]) == ["box_loss", "recall"]
    assert [e.step for e in events.Tensors("recall")] == [1, 2]


def test_progress_formats_every_value():
    bar = train.Progress(total=1, disable=True)
    bar.update({"loss": 0.5, "class_loss": 0.25, "recall": 1 / 3})
    assert {k: v for k, v in bar.postfix.items() if k != "step"} == {
        "loss": "0.5000", "class_loss": "0.2500", "recall": "0.333"}
    assert bar.postfix["step"].endswith("s") and bar.n == 1
    bar.close()



def _lines(err):
    """stderr's ``train:`` lines, the seconds per step replaced by ``S``."""
    return [re.sub(r"\d+\.\d\d s/step$", "S s/step", line) for line in err.splitlines()
            if line.startswith("train:")]


def test_without_the_bar_a_line_every_log_every_steps(tmp_path, capsys):
    model, optimizer, dataset = _setup()
    last = train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=5,
                       model_dir=tmp_path, options=train.TrainOptions(
                           checkpoint_every=5, progress=False, log_every=2))
    lines = _lines(capsys.readouterr().err)
    assert [line.split(":")[1] for line in lines] == [" step 2/5", " step 4/5", " step 5/5"]
    assert all(re.fullmatch(r"train: step \d/5: loss \d+\.\d{4}, dice [01]\.\d{3}, S s/step",
                            line) for line in lines), lines
    assert lines[-1] == (f"train: step 5/5: loss {last['loss']:.4f}, dice {last['dice']:.3f}, "
                         f"S s/step")  # a fresh run: no checkpoint restored, none said


def test_resume_says_which_checkpoint_it_restored_and_logs_a_tenth_of_steps(tmp_path, capsys):
    model, optimizer, dataset = _setup()
    train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=3,
                model_dir=tmp_path, options=train.TrainOptions(progress=False))
    capsys.readouterr()
    model, optimizer, dataset = _setup()  # a new process would start like this
    last = train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=20,
                       model_dir=tmp_path, options=train.TrainOptions(progress=False))
    lines = _lines(capsys.readouterr().err)
    assert lines[0] == f"train: restored {tmp_path}/ckpt-3 (step 3)"
    assert [line.split(":")[1] for line in lines[1:]] == [
        f" step {step}/20" for step in range(4, 21, 2)]   # every 2 = 20 // 10
    assert lines[-1] == (f"train: step 20/20: loss {last['loss']:.4f}, dice "
                         f"{last['dice']:.3f}, S s/step")
