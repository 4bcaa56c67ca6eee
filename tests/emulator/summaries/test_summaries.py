"""tf.summary calls in a step are written on the host with replica 0's values, as on TPU.

The reference is TensorFlow itself: the same calls in a plain ``tf.function`` write the
events each case compares with (tags, steps and values read back from the event files).
"""
import contextlib
import glob

import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.xla.errors import CompileError
from spatial_tf.emulator.compile.trace import trace


def _events(logdir):
    found = []
    for path in sorted(glob.glob(f"{logdir}/*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found.append((event.step, value.tag, tf.make_ndarray(value.tensor)))
    return found


def _tensorflow_events(step_fn, args, logdir, step=None):
    """The events ``step_fn`` writes when TensorFlow runs it as a plain tf.function."""
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default(step=step):
        tf.function(step_fn)(*args)
    writer.flush()
    return _events(logdir)


def _same_events(got, want):
    assert [(s, tag) for s, tag, _ in got] == [(s, tag) for s, tag, _ in want]
    for (_, tag, a), (_, _, b) in zip(got, want):
        if a.dtype == object:  # encoded images, text
            assert a.tolist() == b.tolist(), tag
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=tag)


def _every_kind(x):
    x = spatial_tf.split(x, [1, 2])
    tf.summary.scalar("sum", tf.reduce_sum(x), step=3)
    tf.summary.histogram("values", x, step=4)
    tf.summary.image("picture", tf.reshape(x, [1, 2, 4, 1]) / 16.0, step=5)
    tf.summary.text("note", "in the step", step=6)
    return tf.reduce_sum(x)


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("outer_function", [False, True], ids=["eager", "tf_function"])
def test_scalar_histogram_image_and_text_match_tensorflow(emulators, tmp_path, replicas,
                                                          outer_function):
    emulator = emulators(2, replicas)
    replica0 = tf.reshape(tf.range(8, dtype=tf.float32), [2, 4])
    values = emulator.experimental_distribute_values_from_function(
        lambda c: replica0 + 100.0 * tf.cast(c.replica_id_in_sync_group, tf.float32))
    writer = tf.summary.create_file_writer(str(tmp_path / "emulated"))
    run = lambda v: emulator.run(_every_kind, args=(v,))  # noqa: E731
    with writer.as_default():
        (tf.function(run) if outer_function else run)(values)
    writer.flush()
    _same_events(_events(tmp_path / "emulated"),
                 _tensorflow_events(_every_kind, (replica0,), tmp_path / "tensorflow"))


def test_record_if_with_conditions_known_while_tracing_and_at_run_time(emulators, tmp_path):
    def step(x):
        total = tf.reduce_sum(x)
        with tf.summary.record_if(False):
            tf.summary.scalar("never", total, step=1)
        with tf.summary.record_if(True):
            tf.summary.scalar("always", total, step=1)
        with tf.summary.record_if(total > 10.0):  # decided when the step runs
            tf.summary.scalar("when_large", total, step=1)
        return total

    emulator = emulators(2, 2)
    writer = tf.summary.create_file_writer(str(tmp_path / "emulated"))
    with writer.as_default():
        for scale in (1.0, 4.0):  # sums 8 and 32
            emulator.run(step, args=(tf.fill([2, 4], scale),))
    writer.flush()
    want = []
    for scale in (1.0, 4.0):
        want += _tensorflow_events(step, (tf.fill([2, 4], scale),), tmp_path / f"tf{scale}")
    _same_events(_events(tmp_path / "emulated"), sorted(want, key=lambda e: e[0]))
    assert [t for _, t, _ in want] == ["always", "always", "when_large"]


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_writer_entered_in_the_step_and_the_one_default_at_run(emulators, tmp_path, replicas):
    inside = tf.summary.create_file_writer(str(tmp_path / "inside"))
    around = tf.summary.create_file_writer(str(tmp_path / "around"))
    with emulators(2, replicas).scope():
        counter = tf.Variable(0, dtype=tf.int64)

    def step(x):
        tf.summary.scalar("default", tf.reduce_sum(x), step=counter)
        with inside.as_default(step=counter):  # read here, before the increment
            tf.summary.scalar("entered", tf.reduce_max(x))
        counter.assign_add(1)
        return x

    with around.as_default():
        for _ in range(2):
            emulators(2, replicas).run(step, args=(tf.ones([2, 4]),))
    around.flush()
    assert [(s, t, float(v)) for s, t, v in _events(tmp_path / "around")] == \
        [(0, "default", 8.0), (1, "default", 8.0)]
    # written and flushed by the step's own `with`: no flush needed here
    assert [(s, t, float(v)) for s, t, v in _events(tmp_path / "inside")] == \
        [(0, "entered", 1.0), (1, "entered", 1.0)]


def test_summaries_in_a_step_are_written_eagerly_and_in_a_graph(emulators, tmp_path):
    emulator = emulators(2, 2)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with emulator.scope():  # written by the step: a copy per replica
        counter = tf.Variable(0, dtype=tf.int64)

    def step(x):
        x = spatial_tf.split(x, [1, 2])
        counter.assign_add(1)
        tf.summary.scalar("total", tf.reduce_sum(x), step=counter)
        tf.summary.histogram("values", x, step=7)
        return tf.reduce_sum(x)

    values = emulator.experimental_distribute_values_from_function(
        lambda c: tf.fill([2, 4], float(c.replica_id_in_sync_group + 1)))

    @tf.function
    def in_graph(v):
        return emulator.run(step, args=(v,))

    with writer.as_default():
        eager = emulator.run(step, args=(values,))
        in_graph(values)
    writer.flush()
    assert [float(t) for t in emulator.experimental_local_results(eager)] == [8.0, 16.0]
    events = _events(tmp_path)
    scalars = [(s, float(v)) for s, tag, v in events if tag == "total"]
    assert scalars == [(1, 8.0), (2, 8.0)]  # replica 0's value, the step as it was then
    histograms = [(s, v) for s, tag, v in events if tag == "values"]
    assert [s for s, _ in histograms] == [7, 7]
    assert np.isclose(histograms[0][1][:, 2].sum(), 8)  # bucket counts: replica 0's 8 values


def test_without_a_default_writer_nothing_is_written_and_the_step_runs(emulators, tmp_path):
    def step(x):
        tf.summary.scalar("ignored", tf.reduce_sum(x), step=1)
        return x * 2

    assert emulators(2).run(step, args=(tf.ones([2]),)).numpy().tolist() == [2.0, 2.0]
    assert not list(tmp_path.iterdir())


def test_a_step_traced_again_for_a_new_shape_writes_from_each_program(emulators, tmp_path):
    def step(x):
        tf.summary.scalar("size", tf.cast(tf.size(x), tf.float32), step=tf.shape(x, tf.int64)[0])
        return x

    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for rows in (2, 4, 2):
            emulators(2).run(step, args=(tf.ones([rows, 4]),))
    writer.flush()
    assert [(s, float(v)) for s, _, v in _events(tmp_path)] == \
        [(2, 8.0), (4, 16.0), (2, 8.0)]


def test_without_a_step_the_default_step_where_the_step_runs_is_used(emulators, tmp_path):
    emulator = emulators(2)

    def step(x):
        tf.summary.scalar("loss", tf.reduce_sum(x))
        return x

    emulator.compile(step, args=(tf.ones([2]),))  # traced where no default step is set
    writer = tf.summary.create_file_writer(str(tmp_path))
    for step_number in (5, 6):
        with writer.as_default(step=step_number):
            emulator.run(step, args=(tf.ones([2]),))
    writer.flush()
    assert [s for s, _, _ in _events(tmp_path)] == [5, 6]


def test_a_step_without_summaries_gets_no_extra_results():
    def step(x):
        return tf.reduce_sum(x * 2.0)

    traced = trace(step, (tf.ones([4]),), {})
    assert traced.summaries == () and len(traced.output_specs) == 1
    assert len(traced.result_shapes) == 1
    assert not any(op.type.startswith(("WriteSummary", "Flush")) for op in
                   traced.graph.get_operations())


def test_the_traced_program_holds_no_summary_op_and_returns_their_inputs():
    def step(x):
        tf.summary.scalar("loss", tf.reduce_sum(x), step=2)
        return x * 2.0

    traced = trace(step, (tf.ones([4]),), {})
    assert "WriteSummary" in {op.type for op in traced.graph.get_operations()}
    assert len(traced.output_specs) == 3 and len(traced.summaries) == 1  # value, step
    assert "WriteSummary" not in traced.module.SerializeToString().decode("latin-1")


def test_nothing_in_tensorflow_is_rebound_while_a_step_is_traced(emulators):
    writer_class = type(tf.summary.create_file_writer("ram://spatial_tf_tests/rebinding"))

    def bound():
        return (tf.summary.write, tf.compat.v2.summary.write, tf.summary.scalar,
                tf.summary.SummaryWriter.as_default, writer_class.as_default)

    before, during = bound(), []

    def step(x):
        during.append(bound())
        tf.summary.scalar("loss", tf.reduce_sum(x), step=1)
        return x

    emulators(2).run(step, args=(tf.ones([2]),))
    assert during and all(a is b for a, b in zip(during[0], before))
    assert all(a is b for a, b in zip(bound(), before))


def test_a_writer_entered_in_the_step_without_any_step_is_refused_before_it_runs(
        emulators, tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    emulator = emulators(2)
    with emulator.scope():
        total = tf.Variable(0.0)

    def step(x):
        total.assign_add(tf.reduce_sum(x))
        with writer.as_default():
            tf.summary.scalar("loss", tf.reduce_sum(x))
        return x

    with pytest.raises(ValueError, match=r"made default, with no step.*Fix: pass step="):
        emulator.run(step, args=(tf.ones([2]),))
    assert float(total.numpy()) == 0.0   # refused before the step ran: nothing updated
    tf.summary.experimental.set_step(4)
    try:
        emulator.run(step, args=(tf.ones([2]),))   # a default step set where it runs
    finally:
        tf.summary.experimental.set_step(None)
    assert float(total.numpy()) > 0.0   # ran: updated


def test_a_writer_entered_in_the_step_with_nothing_recorded_only_runs_the_step(
        emulators, tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))

    def step(x):
        with writer.as_default(step=1), tf.summary.record_if(False):
            tf.summary.scalar("skipped", tf.reduce_sum(x))  # no op; the flush remains
        return x * 3.0

    traced = trace(step, (tf.ones([2]),), {})
    assert traced.summaries == () and len(traced.output_specs) == 1
    assert emulators(2).run(step, args=(tf.ones([2]),)).numpy().tolist() == [3.0, 3.0]


def test_a_loop_whose_result_the_step_uses_is_refused_with_the_fix(emulators):
    # a loop holding summaries runs again on the host after the step; one whose
    # result the compiled step needs cannot
    def step(x):
        def body(i, total):
            tf.summary.scalar("inside", total, step=tf.cast(i, tf.int64))
            return i + 1, total + tf.reduce_sum(x)
        return tf.while_loop(lambda i, _: i < 3, body, [0, 0.0])[1]

    with pytest.raises(CompileError, match=r"op While \(node 'while'\) is a tf.while_loop .*"
                                           r"holding tf.summary calls whose result the step "
                                           r"uses \('while:\d'\).*Fix: compute what the step "
                                           r"uses outside"):
        emulators(2).run(step, args=(tf.ones([2]),))


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("writer_in_step", [False, True], ids=["writer_around", "writer_in_step"])
def test_record_if_with_a_tensor_of_the_tf_function_that_calls_run(emulators, tmp_path, replicas,
                                                                   writer_in_step):
    # the condition is a tensor of the outer function, which the step's program (compiled
    # on its own) cannot take: it is applied where the step runs, per call; a record_if
    # tensor of the step's own decides alone, as in TensorFlow
    def events(run, folder):
        writer = tf.summary.create_file_writer(str(folder))

        def step(x):
            total = tf.reduce_sum(x)
            with writer.as_default() if writer_in_step else contextlib.nullcontext():
                tf.summary.scalar("total", total, step=1)
                with tf.summary.record_if(total > 10.0):
                    tf.summary.scalar("large", total, step=2)
            return total

        @tf.function
        def outer(x, flag):
            with writer.as_default(), tf.summary.record_if(flag):
                return run(step, x)

        for flag, scale in [(True, 1.0), (False, 4.0), (True, 4.0), (False, 1.0)]:
            outer(tf.fill([2, 4], scale), tf.constant(flag))
        writer.flush()
        return _events(folder)

    emulator = emulators(2, replicas)
    got = events(lambda step, x: emulator.run(step, args=(x,)), tmp_path / "emulated")
    want = events(lambda step, x: step(x), tmp_path / "tensorflow")
    _same_events(got, want)
    assert [(s, t) for s, t, _ in want] == [(1, "total"), (2, "large"), (1, "total"),
                                            (2, "large")]
