"""Summaries anywhere in a step: inside a tf.cond, a loop over tensors, a nested
tf.function, TensorFlow's other write ops and a run-time tf.summary.record_if.

TPUStrategy runs a step's summary ops on the host where they stand. Each case runs the
same step under the emulator and under plain TensorFlow (a ``tf.function`` with replica
0's inputs, no strategy) and compares the event files read back: every event's step,
tag and value, in order.
"""
import contextlib
import glob

import pytest
import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2 as summary_ops

import spatial_tf
from spatial_tf.emulator.xla.errors import CompileError


def _events(logdir):
    """``(step, Summary.Value)`` of every summary event under ``logdir``, in order."""
    found = []
    for path in sorted(glob.glob(f"{logdir}/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            found += [(event.step, value) for value in event.summary.value]
    return found


def _readable(events):
    return [(step, value.tag, value.WhichOneof("value")) for step, value in events]


def _same_events(got, want):
    assert _readable(got) == _readable(want)
    assert got == want  # the values themselves: tensors, simple values, histograms, PNGs


def _steps(logdir, make_step, inputs, strategy=None):
    """Run ``make_step(counter)`` once per input, under ``strategy`` or plain TensorFlow,
    with a writer on ``logdir`` default; the events written."""
    writer = tf.summary.create_file_writer(str(logdir))
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        counter = tf.Variable(0, dtype=tf.int64)
    step = make_step(counter)
    run = (lambda x: strategy.run(step, args=(x,))) if strategy is not None \
        else tf.function(step)
    with writer.as_default():
        for x in inputs:
            run(x)
    writer.flush()
    return _events(logdir), int(counter.numpy())


def _compare(emulator, tmp_path, make_step, inputs, replica0=None):
    """The emulator's events against TensorFlow's (with replica 0's inputs)."""
    got, got_count = _steps(tmp_path / "emulated", make_step, inputs, emulator)
    want, want_count = _steps(tmp_path / "tensorflow", make_step, replica0 or inputs)
    _same_events(got, want)
    assert got_count == want_count
    return got


def _per_replica(emulator, value):
    """``value`` on replica 0, ``value + 100 * r`` on replica r."""
    return emulator.experimental_distribute_values_from_function(
        lambda c: value + 100.0 * tf.cast(c.replica_id_in_sync_group, value.dtype))


# ---------------------------------------------------------------- TensorFlow's own test


@pytest.mark.parametrize("replicas", [1, 4])
def test_spmd_with_summary(tmp_path, replicas):
    # tensorflow/python/distribute/tpu_strategy_model_parallelism_test.py,
    # TPUStrategyModelParallelismTest.test_spmd_with_summary: TPUStrategy with SPMD over
    # 2 cores per replica; a tf.function step enters the writer, records under
    # record_if(True) a summary_ops_v2 scalar (a WriteScalarSummary: at several replicas
    # inside the "replica 0 only" cond) at a variable step and advances the step.
    strategy = spatial_tf.Emulator(num_cores_per_replica=2, num_replicas=replicas)
    summary_dir = str(tmp_path)
    writer = summary_ops.create_file_writer_v2(summary_dir)
    const_multiple = 2
    num_iters = 10
    expected_event_count = num_iters + 1

    with strategy.scope():
        step = tf.Variable(1, dtype=tf.int64)

    @tf.function
    def run():
        with writer.as_default():
            with summary_ops.record_if(True):
                summary_ops.scalar("result", step * const_multiple, step=step)
                step.assign_add(1)

    for _ in range(num_iters):
        strategy.run(run, args=())

    for val in step.values:  # each replica's copy on each of its cores
        for var in val.variables:
            assert int(var.numpy()) == expected_event_count

    events = [e for path in glob.glob(f"{summary_dir}/events.out.tfevents.*")
              for e in tf.compat.v1.train.summary_iterator(path)]
    assert len(events) == expected_event_count
    # Event[0] is generic metadata and summary_ops data starts at event[1].
    for logged_step in range(1, expected_event_count):
        assert events[logged_step].step == logged_step
        assert events[logged_step].summary.value[0].simple_value == \
            logged_step * const_multiple


# ---------------------------------------------------------------- constructs


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("form", ["tf_cond", "autograph_if"])
def test_a_summary_every_n_steps_under_a_cond(emulators, tmp_path, replicas, form):
    def make_step(counter):
        def step(x):
            x = spatial_tf.split(x, [1, 2])
            loss = tf.reduce_sum(x * x)
            if form == "tf_cond":
                tf.cond(counter % 3 == 0,
                        lambda: tf.summary.scalar("loss", loss, step=counter),
                        lambda: tf.constant(False))
            elif counter % 3 == 0:  # autograph: a tf.cond, both outcomes over the steps
                tf.summary.scalar("loss", loss, step=counter)
                tf.summary.histogram("x", x, step=counter)
            counter.assign_add(1)
            return loss
        return step

    emulator = emulators(2, replicas)
    replica0 = [tf.reshape(tf.range(8, dtype=tf.float32), [2, 4]) + float(k) for k in range(7)]
    events = _compare(emulator, tmp_path, make_step,
                      [_per_replica(emulator, x) for x in replica0], replica0)
    assert sorted({s for s, _ in events}) == [0, 3, 6]


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_summary_in_a_nested_tf_function(emulators, tmp_path, replicas):
    def make_step(counter):
        @tf.function  # one per run: a tf.function keeps the writer it was traced with
        def log(values, at):
            tf.summary.scalar("total", tf.reduce_sum(values), step=at)
            tf.summary.text("note", tf.strings.format("max {}", tf.reduce_max(values)),
                            step=at)

        def step(x):
            y = x * 2.0
            log(y, counter)
            counter.assign_add(1)
            return y
        return step

    emulator = emulators(2, replicas)
    replica0 = [tf.fill([2, 4], float(k)) for k in range(3)]
    events = _compare(emulator, tmp_path, make_step,
                      [_per_replica(emulator, x) for x in replica0], replica0)
    assert [(s, v.tag) for s, v in events][:2] == [(0, "total"), (0, "note")]


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_summary_in_a_for_loop_over_a_tensor_range(emulators, tmp_path, replicas):
    def make_step(counter):
        def step(x):
            for i in tf.range(tf.shape(x)[0]):  # autograph: a tf.while_loop
                tf.summary.scalar("row", tf.reduce_sum(x[i]),
                                  step=counter * 10 + tf.cast(i, tf.int64))
            counter.assign_add(1)
            return tf.reduce_sum(x)
        return step

    emulator = emulators(2, replicas)
    replica0 = [tf.reshape(tf.range(12, dtype=tf.float32), [3, 4]) * float(k + 1)
                for k in range(2)]
    events = _compare(emulator, tmp_path, make_step,
                      [_per_replica(emulator, x) for x in replica0], replica0)
    # one value per iteration, each its own
    assert [s for s, _ in events] == [0, 1, 2, 10, 11, 12]
    assert [tf.make_ndarray(v.tensor).item() for _, v in events][:3] == [6.0, 22.0, 38.0]


@pytest.mark.parametrize("replicas", [1, 2])
def test_tensorflow_raw_write_ops(emulators, tmp_path, replicas):
    def make_step(counter):
        def step(x):
            with summary_ops.record_if(True):  # these ops record only when told to
                summary_ops.scalar("scalar", tf.reduce_sum(x), step=counter)
                summary_ops.histogram("histogram", x, step=counter)
                summary_ops.image("image", tf.reshape(x, [1, 2, 4, 1]) / 100.0,
                                  step=counter)
                summary_ops.generic("generic", tf.reduce_max(x), step=counter)
            counter.assign_add(1)
            return x
        return step

    emulator = emulators(2, replicas)
    replica0 = [tf.reshape(tf.range(8, dtype=tf.float32), [2, 4]) * float(k) for k in (1, 2)]
    events = _compare(emulator, tmp_path, make_step,
                      [_per_replica(emulator, x) for x in replica0], replica0)
    assert [v.WhichOneof("value") for _, v in events[:4]] == \
        ["simple_value", "histo", "image", "tensor"]


@pytest.mark.parametrize("replicas", [1, 2])
def test_raw_write_scalar_summary_op_to_a_writer_of_its_own(emulators, tmp_path, replicas):
    writer = tf.summary.create_file_writer(str(tmp_path / "own"))
    handle = writer._resource  # what summary_ops_v2 passes to the op

    def step(x):
        tf.raw_ops.WriteScalarSummary(writer=handle, step=tf.constant(5, tf.int64),
                                      tag="raw", value=tf.reduce_sum(x))
        return x

    emulator = emulators(2, replicas)
    emulator.run(step, args=(_per_replica(emulator, tf.ones([2, 4])),))
    writer.flush()
    got = _events(tmp_path / "own")
    reference = tf.summary.create_file_writer(str(tmp_path / "tensorflow"))

    def plain(x):
        tf.raw_ops.WriteScalarSummary(writer=reference._resource, step=tf.constant(5, tf.int64),
                                      tag="raw", value=tf.reduce_sum(x))

    tf.function(plain)(tf.ones([2, 4]))
    reference.flush()
    _same_events(got, _events(tmp_path / "tensorflow"))
    assert [(s, v.tag, v.simple_value) for s, v in got] == [(5, "raw", 8.0)]


@pytest.mark.parametrize("replicas", [1, 2])
def test_record_if_with_a_tensor_predicate(emulators, tmp_path, replicas):
    def make_step(counter):
        def step(x):
            total = tf.reduce_sum(x)
            with tf.summary.record_if(counter % 2 == 0):  # decided each step, when it runs
                tf.summary.scalar("even", total, step=counter)
                summary_ops.scalar("even_raw", total, step=counter)
            with tf.summary.record_if(lambda: total > 20.0):  # a callable: at the write
                tf.summary.scalar("large", total, step=counter)
            counter.assign_add(1)
            return total
        return step

    emulator = emulators(2, replicas)
    replica0 = [tf.fill([2, 4], float(k)) for k in range(5)]  # sums 0, 8, 16, 24, 32
    events = _compare(emulator, tmp_path, make_step,
                      [_per_replica(emulator, x) for x in replica0], replica0)
    assert [(s, v.tag) for s, v in events] == [
        (0, "even"), (0, "even_raw"), (2, "even"), (2, "even_raw"), (3, "large"),
        (4, "even"), (4, "even_raw"), (4, "large")]


def test_summaries_in_a_cond_inside_an_outer_tf_function(emulators, tmp_path):
    def make_step(counter):
        def step(x):
            if counter % 2 == 1:
                tf.summary.scalar("odd", tf.reduce_mean(x), step=counter)
            counter.assign_add(1)
            return x
        return step

    emulator = emulators(2, 2)
    writer = tf.summary.create_file_writer(str(tmp_path / "emulated"))
    with emulator.scope():
        counter = tf.Variable(0, dtype=tf.int64)
    step = make_step(counter)
    outer = tf.function(lambda x: emulator.run(step, args=(x,)))
    replica0 = [tf.fill([2, 4], float(k)) for k in range(4)]
    with writer.as_default():
        for x in replica0:
            outer(_per_replica(emulator, x))
    writer.flush()
    want, _ = _steps(tmp_path / "tensorflow", make_step, replica0)
    _same_events(_events(tmp_path / "emulated"), want)
    assert [s for s, _ in want] == [1, 3]


# ---------------------------------------------------------------- what is refused


def test_a_loop_that_also_updates_variables_is_refused_with_the_fix(emulators):
    emulator = emulators(2)
    with emulator.scope():
        total = tf.Variable(0.0)

    def step(x):
        for i in tf.range(3):
            total.assign_add(tf.reduce_sum(x))
            tf.summary.scalar("total", total.read_value(), step=tf.cast(i, tf.int64))
        return x

    writer = tf.summary.create_file_writer("ram://spatial_tf_tests/loop_updates")
    with writer.as_default(), pytest.raises(
            CompileError, match=r"op While .* is a tf.while_loop .* holding tf.summary calls "
                                r"that also changes variables \(AssignAddVariableOp.*; "
                                r"TPUStrategy runs summary ops on the host as the TPU "
                                r"reaches them \(outside compilation\), but the emulator "
                                r"writes such summaries by running .*Fix: "
                                r"keep only the summary calls"):
        emulator.run(step, args=(tf.ones([2]),))
    assert float(total.numpy()) == 0.0


def test_a_nested_function_whose_result_the_step_uses_is_refused_with_the_fix(emulators):
    @tf.function
    def loss_and_log(x):
        loss = tf.reduce_sum(x)
        tf.summary.scalar("loss", loss, step=1)
        return loss

    def step(x):
        return loss_and_log(x) * 2.0

    writer = tf.summary.create_file_writer("ram://spatial_tf_tests/nested_result")
    with writer.as_default(), pytest.raises(
            CompileError, match=r"is a nested tf.function holding tf.summary calls whose "
                                r"result the step uses .*; TPUStrategy runs summary ops on "
                                r"the host as the TPU reaches them .*Fix: compute what the step uses "
                                r"outside"):
        emulators(2).run(step, args=(tf.ones([2]),))
