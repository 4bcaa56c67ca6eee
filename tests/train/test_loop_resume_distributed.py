"""train() under distributed strategies: a stopped or killed run, resumed from its
checkpoint, sees exactly the batches (by their contents) an uninterrupted run sees."""
import glob
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf import data, train

EXAMPLES, PER_REPLICA, STEPS = 7, 2, 8  # 7 examples: batches straddle the epochs


class Killed(Exception):
    """Stands for a kill between two checkpoints."""


def _examples(context=None):
    """Example ``i`` is an image filled with ``i`` and tagged ``i``; reshuffled every epoch
    (seeded, so a new process sees the same order)."""
    ds = tf.data.Dataset.range(EXAMPLES).map(lambda i: {
        "image": tf.fill([4, 4, 1], tf.cast(i, tf.float32) / EXAMPLES),
        "tag": tf.cast(i, tf.float32)})
    return ds.shuffle(EXAMPLES, seed=3, reshuffle_each_iteration=True).repeat()


def _model_and_step(strategy, image_spec):
    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(1, 3, padding="same"),
                                  keras.layers.GlobalAveragePooling2D()])
        optimizer = keras.optimizers.SGD(0.5, momentum=0.5)

    def step_fn(batch):
        image = batch["image"]
        if image_spec is not None:
            image = spatial_tf.split(image, image_spec)
        with tf.GradientTape() as tape:
            out = model(image, training=True)[:, 0]
            loss = tf.reduce_mean(tf.square(out - batch["tag"] / EXAMPLES)) / replicas
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        mine = [tf.cast(tf.equal(replica, r), tf.float32) for r in range(replicas)]
        # train() averages every value over the replicas: each replica reports its tags
        # under its own name and zeros under the others', so replicas x mean = the tag
        tags = {f"tag_r{r}_{b}": mine[r] * batch["tag"][b] * replicas
                for r in range(replicas) for b in range(PER_REPLICA)}
        return dict(tags, loss=loss)

    return model, optimizer, step_fn


def _strategies(virtual_cpus):
    return {
        "mirrored_2_replicas": (lambda: tf.distribute.MirroredStrategy(
            virtual_cpus[:2], cross_device_ops=tf.distribute.ReductionToOneDevice()), None),
        "emulator_4_cores": (lambda: spatial_tf.Emulator(num_cores_per_replica=4), [1, 2, 2, 1]),
        "emulator_2_replicas_2_cores": (
            lambda: spatial_tf.Emulator(num_cores_per_replica=2, num_replicas=2), [1, 2, 1, 1]),
    }


def _run(make_strategy, image_spec, model_dir, steps, stop=None, checkpoint_every=100):
    """One process's worth: a new strategy, model, optimizer and dataset, then train()."""
    strategy = make_strategy()
    model, optimizer, step_fn = _model_and_step(strategy, image_spec)
    dist = data.distribute(strategy, _examples, PER_REPLICA * strategy.num_replicas_in_sync)
    out = train.train(strategy, model, optimizer, dist, steps=steps, model_dir=model_dir,
                      options=train.TrainOptions(step_fn=step_fn, checkpoint_every=checkpoint_every, stop=stop, progress=False))
    return out, model


def _kill_after_step_3(model_dir):
    """A ``stop`` for train(checkpoint_every=2) that raises on its second check after
    ckpt-2 is written: after step 3 ran, before any checkpoint of it."""
    checks = []

    def kill():
        latest = tf.train.latest_checkpoint(model_dir)
        if latest and os.path.basename(latest) == "ckpt-2":
            checks.append(latest)
            if len(checks) == 2:
                raise Killed
        return False

    return kill


def _logged(model_dir):
    """{step: {name: value}} from the TensorBoard summaries of every run in model_dir."""
    steps = {}
    for path in glob.glob(os.path.join(model_dir, "train", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                steps.setdefault(event.step, {}).setdefault(value.tag, []).append(
                    float(tf.make_ndarray(value.tensor)))
    return steps


def _batches(logged, replicas):
    """Per step: the tags of every replica's batch, as ints (each value logged once per run
    that ran the step; all runs of a step must agree)."""
    out = {}
    for step, values in sorted(logged.items()):
        tags = []
        for r in range(replicas):
            for b in range(PER_REPLICA):
                seen = values[f"tag_r{r}_{b}"]
                assert len(set(seen)) == 1, f"step {step}: runs saw different batches {seen}"
                tags.append(seen[0])
        assert tags == [round(t) for t in tags]
        out[step] = [int(t) for t in tags]
    return out


@pytest.mark.parametrize("name", ["mirrored_2_replicas", "emulator_4_cores",
                                  "emulator_2_replicas_2_cores"])
def test_resumed_runs_see_the_uninterrupted_batches(tmp_path, virtual_cpus, name):
    make_strategy, image_spec = _strategies(virtual_cpus)[name]
    replicas = make_strategy().num_replicas_in_sync
    full, full_model = _run(make_strategy, image_spec, str(tmp_path / "full"), STEPS)
    expected = _batches(_logged(str(tmp_path / "full")), replicas)
    assert sorted(expected) == list(range(1, STEPS + 1))
    flat = [t for step in sorted(expected) for t in expected[step]]
    # every example once per epoch, reshuffled: the tags a wrong position would repeat
    assert sorted(flat[:EXAMPLES]) == list(range(EXAMPLES)) and flat[:EXAMPLES] != flat[EXAMPLES:2 * EXAMPLES]

    resumed = str(tmp_path / "resumed")
    with pytest.raises(Killed):  # killed after step 3: the last checkpoint holds step 2
        _run(make_strategy, image_spec, resumed, STEPS, stop=_kill_after_step_3(resumed),
             checkpoint_every=2)
    assert os.path.basename(tf.train.latest_checkpoint(resumed)) == "ckpt-2"
    assert sorted(_logged(resumed)) == [1, 2, 3]
    out, _ = _run(make_strategy, image_spec, resumed, 5)  # redoes step 3, stops after 5
    assert out["step"] == 5
    out, model = _run(make_strategy, image_spec, resumed, STEPS)
    assert out["step"] == STEPS

    assert _batches(_logged(resumed), replicas) == expected
    assert out["loss"] == pytest.approx(full["loss"], rel=1e-5, abs=1e-7)
    for a, b in zip(model.weights, full_model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


def test_checkpoint_without_iterator_resumes_under_the_default_strategy(tmp_path, virtual_cpus):
    """Written under MirroredStrategy (no iterator state), resumed with a tf.data iterator:
    the position is replayed, then saved with the iterator from there on."""
    make_strategy, _ = _strategies(virtual_cpus)["mirrored_2_replicas"]
    _run(make_strategy, None, str(tmp_path), 3)
    model, optimizer, _ = _model_and_step(tf.distribute.get_strategy(), None)

    def step_fn(batch):
        return {"tag0": batch["tag"][0], "tag1": batch["tag"][1]}

    plain = _examples().batch(PER_REPLICA * 2)  # the same global batches
    train.train(tf.distribute.get_strategy(), model, optimizer, plain, steps=4,
                model_dir=tmp_path,
                options=train.TrainOptions(step_fn=step_fn, progress=False))
    logged = _logged(str(tmp_path))
    uninterrupted = [b["tag"].numpy().tolist() for b in _examples().batch(4).take(4)]
    assert [logged[4]["tag0"][-1], logged[4]["tag1"][-1]] == uninterrupted[3][:2]
    ckpt = train.Checkpointer(tmp_path, model=model, optimizer=optimizer,
                              iterator=iter(_examples().batch(4)))
    assert ckpt.restore() == 4 and "iterator" in ckpt.restored


def test_dataset_function_gets_the_restored_step(tmp_path):
    """A dataset given as a function of the restored step is used as it is, not replayed."""
    model, optimizer, _ = _model_and_step(tf.distribute.get_strategy(), None)
    asked = []

    def dataset(done):
        asked.append(done)
        return _examples().batch(2).skip(done)

    def step_fn(batch):
        return {"first": batch["tag"][0]}

    train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=2,
                model_dir=tmp_path,
                options=train.TrainOptions(step_fn=step_fn, progress=False))
    train.train(tf.distribute.get_strategy(), model, optimizer, dataset, steps=5,
                model_dir=tmp_path,
                options=train.TrainOptions(step_fn=step_fn, progress=False))
    assert asked == [0, 2]
    firsts = [b["tag"][0].numpy() for b in _examples().batch(2).take(5)]
    logged = _logged(str(tmp_path))
    assert [logged[s]["first"][-1] for s in range(1, 6)] == firsts


def test_replay_past_the_end_of_the_data(tmp_path, virtual_cpus):
    make_strategy, _ = _strategies(virtual_cpus)["mirrored_2_replicas"]
    _run(make_strategy, None, str(tmp_path), 3)
    strategy = make_strategy()
    model, optimizer, step_fn = _model_and_step(strategy, None)
    short = data.distribute(strategy, lambda c: _examples().take(4), 4)  # 1 global batch
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ValueError, match=r"the dataset ended after 1 batches while replaying "
                                         r"the 3 steps the checkpoint holds.*Fix: repeat\(\) it"):
        train.train(strategy, model, optimizer, short, steps=5, model_dir=tmp_path,
                    options=train.TrainOptions(step_fn=step_fn, progress=False))
    assert sorted(os.listdir(tmp_path)) == before
