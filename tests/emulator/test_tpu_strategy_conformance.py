"""TensorFlow's own TPUStrategy tests, rewritten against the emulator.

Each test names the TensorFlow test it rewrites (tensorflow/python/distribute/
tpu_strategy_test.py, strategy_test_lib.py, strategy_common_test.py, values_test.py)
and keeps TensorFlow's expected values, written in terms of ``num_replicas_in_sync``
so they hold at one replica and at several. Every test runs on
``Emulator(num_cores_per_replica=2, num_replicas=R)`` for R in {1, 2}. What needs a
real TPU cluster (cluster resolver, packed variables, embeddings, model parallelism by
logical-device assignment, several hosts) is not rewritten.
"""
import glob

import keras
import pytest
import tensorflow as tf
from spatial_tf.emulator.xla.errors import CompileError


REPLICAS = [1, 2]
CORES = 2


@pytest.fixture(params=REPLICAS, ids=lambda r: f"replicas{r}")
def strategy(request, emulators):
    return emulators(CORES, request.param)


def _local(strategy, value):
    return [t.numpy() for t in strategy.experimental_local_results(value)]


# ---------------------------------------------------------------- run and reduce


@pytest.mark.parametrize("outer_function", [False, True], ids=["eager", "tf_function"])
def test_reduce_sum_of_constant(strategy, outer_function):
    # strategy_common_test.ReduceTest.testBasic: strategy.run(lambda: 1.) reduced with
    # SUM over replicas is num_replicas_in_sync.
    def fn():
        return tf.constant(1.0)

    def run():
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(fn), axis=None)

    if outer_function:
        run = tf.function(run)
    assert float(run()) == strategy.num_replicas_in_sync


@pytest.mark.parametrize("outer_function", [False, True], ids=["eager", "tf_function"])
def test_reduce_along_axis(strategy, outer_function):
    # strategy_common_test.ReduceTest.testAxis: each replica returns [1., 2.];
    # MEAN over axis 0 and replicas is 1.5, SUM is 3 * num_replicas_in_sync.
    def fn():
        return tf.constant([1.0, 2.0])

    def run():
        x = strategy.run(fn)
        return (strategy.reduce(tf.distribute.ReduceOp.MEAN, x, axis=0),
                strategy.reduce(tf.distribute.ReduceOp.SUM, x, axis=0))

    if outer_function:
        run = tf.function(run)
    mean, total = run()
    assert float(mean) == 1.5
    assert float(total) == 3.0 * strategy.num_replicas_in_sync


def test_reduce_mean_of_squares(strategy):
    # tpu_strategy_test.TPUStrategyDistributionTest.test_reduce: the per-replica squares
    # of [2., 3.] have MEAN 6.5; rewritten with the global batch [2., 3.] split over
    # the replicas and reduce along axis 0, so that it holds at one and two replicas.
    dataset = tf.data.Dataset.from_tensor_slices([2.0, 3.0]).batch(2, drop_remainder=True)
    x = next(iter(strategy.experimental_distribute_dataset(dataset)))
    out = strategy.run(tf.function(tf.square), args=(x,))
    assert [v.tolist() for v in _local(strategy, out)] == \
        {1: [[4.0, 9.0]], 2: [[4.0], [9.0]]}[strategy.num_replicas_in_sync]
    mean = strategy.reduce(tf.distribute.ReduceOp.MEAN, out, axis=0)
    assert float(mean) == 6.5


def test_run_returns_per_replica_values_and_local_results(strategy):
    # strategy_test_lib.DistributionTestBase._test_run (run_in_function=True): each
    # replica's step sees its own replica id; experimental_local_results lists one
    # result per replica, in replica order.
    @tf.function
    def train_step():
        def step_fn():
            ctx = tf.distribute.get_replica_context()
            return tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0

        return strategy.run(step_fn)

    results = strategy.experimental_local_results(train_step())
    assert len(results) == strategy.num_replicas_in_sync
    assert [float(t) for t in results] == [float(i + 1) for i in range(len(results))]


def test_cluster_in_graph_and_while_body_fn(strategy):
    # tpu_strategy_test.TPUStrategyTest.test_cluster_in_graph_and_while_body_fn: ten
    # strategy.run calls in a tf.range loop inside tf.function, each feeding the next;
    # the SUM over replicas is num_replicas_in_sync * 10.
    @tf.function
    def train_step():
        def step_fn(prev):
            return prev + 1

        def init_fn():
            return tf.zeros(shape=())

        prev = strategy.run(init_fn)
        for _ in tf.range(10):
            prev = strategy.run(step_fn, args=(prev,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, prev, axis=None)

    assert float(train_step()) == strategy.num_replicas_in_sync * 10


def test_two_clusters_with_same_fn(strategy):
    # tpu_strategy_test.TPUStrategyTest.test_two_clusters_with_same_fn: the same step
    # run from two nested tf.functions; TF only checks it runs, here also the value.
    @tf.function
    def foo(x):
        return strategy.run(lambda x: x + 1, (x,))

    @tf.function
    def bar(x):
        foo(x)
        return foo(x)

    assert [int(v) for v in strategy.experimental_local_results(bar(tf.constant(1)))] == \
        [2] * strategy.num_replicas_in_sync


def test_using_external_variable_inside_tf_function(strategy):
    # tpu_strategy_test.TPUStrategyTest.test_using_external_variable_inside_tf_function:
    # a variable made outside the scope, read in the step; replica i gets x = i. As in
    # TF, the dataset is batched without drop_remainder (batch size unknown statically).
    r = strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.range(r * 2, output_type=tf.float32).batch(r)
    input_iterator = iter(strategy.experimental_distribute_dataset(dataset))
    v = tf.Variable(2.0)

    @tf.function
    def train_step(data):
        def computation(inputs):
            return inputs + v

        return strategy.run(computation, args=(data,))

    expected = [[x + 2.0] for x in range(r)]
    got = _local(strategy, train_step(next(input_iterator)))
    assert [g.tolist() for g in got] == expected


def test_step_with_nested_structures_and_none(strategy):
    # values_test / strategy_test_lib: run takes and returns nested structures (dicts,
    # tuples, lists); None in the outputs comes back as None, as in TPUStrategy.run.
    def step_fn(inputs):
        a, (b, c) = inputs["a"], inputs["bc"]
        return {"sum": a + b, "pair": (c * 2, None), "list": [a * tf.cast(c, tf.float32)]}

    inputs = {"a": tf.constant([1.0, 2.0]), "bc": (tf.constant([3.0, 4.0]), tf.constant(5))}
    out = strategy.run(step_fn, args=(inputs,))
    assert out["pair"][1] is None
    for s in _local(strategy, out["sum"]):
        assert s.tolist() == [4.0, 6.0]
    assert [int(c) for c in _local(strategy, out["pair"][0])] == [10] * strategy.num_replicas_in_sync
    for m in _local(strategy, out["list"][0]):
        assert m.tolist() == [5.0, 10.0]


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64, tf.float32, tf.float64])
def test_int_and_float_dtypes(strategy, dtype):
    # tpu_strategy_test.TPUTest.test_tpu_return_int32 and values_test dtype cases: the
    # step keeps the dtype of its inputs and outputs; all_reduce SUM in every dtype.
    def step_fn(x):
        total = tf.distribute.get_replica_context().all_reduce("SUM", x)
        return x + tf.ones_like(x), total

    x = tf.constant([1, 2, 3, 4], dtype)
    plus, total = strategy.run(step_fn, args=(x,))
    for p, t in zip(strategy.experimental_local_results(plus),
                    strategy.experimental_local_results(total)):
        assert p.dtype == dtype and t.dtype == dtype
        assert p.numpy().tolist() == [2, 3, 4, 5]
        assert t.numpy().tolist() == [v * strategy.num_replicas_in_sync for v in [1, 2, 3, 4]]


def test_all_reduce_sum_and_mean(strategy):
    # strategy_test_lib.DistributionTestBase._test_all_reduce_sum / _mean: replica i
    # contributes i + 1; SUM is the total, MEAN the average, on every replica.
    r = strategy.num_replicas_in_sync

    @tf.function
    def run():
        def fn():
            ctx = tf.distribute.get_replica_context()
            v = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0
            return ctx.all_reduce("SUM", v), ctx.all_reduce("MEAN", v)

        return strategy.run(fn)

    total, mean = run()
    assert [float(t) for t in _local(strategy, total)] == [r * (r + 1) / 2] * r
    assert [float(m) for m in _local(strategy, mean)] == [(r + 1) / 2] * r


def test_all_reduce_sum_gradient_tape(strategy):
    # strategy_test_lib.DistributionTestBase._test_all_reduce_sum_gradient_tape: the
    # gradient of all_reduce(SUM, x * w) with respect to w sums x over replicas.
    r = strategy.num_replicas_in_sync
    with strategy.scope():
        w = tf.Variable(3.0)

    def fn():
        ctx = tf.distribute.get_replica_context()
        x = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0
        with tf.GradientTape() as tape:
            y = ctx.all_reduce("SUM", x * w)
        return y, tape.gradient(y, w)

    y, g = strategy.run(fn)
    assert [float(v) for v in _local(strategy, y)] == [3.0 * r * (r + 1) / 2] * r
    # the gradient of all_reduce(SUM) is all_reduce(SUM) of the upstream gradient (TF's
    # ReplicaContext.all_reduce): d y / d w on replica i is r * x_i
    assert [float(v) for v in _local(strategy, g)] == [r * (i + 1.0) for i in range(r)]


def test_experimental_local_results_of_plain_value(strategy):
    # values_test.PerReplicaTest / strategy_test_lib: local results of a non-distributed
    # value is a one-tuple of it.
    t = tf.constant(3.0)
    assert strategy.experimental_local_results(t) == (t,)


# ---------------------------------------------------------------- input


def test_for_loop_over_distributed_dataset_in_tf_function(strategy):
    # strategy_common_test.DistributedIteratorTest / input_lib_test "for x in
    # dist_dataset" in tf.function: every global batch is split over the replicas and
    # the SUM over replicas of each step's sum covers the whole dataset.
    r = strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.range(8 * r, output_type=tf.float32).batch(2 * r, drop_remainder=True)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    @tf.function
    def loop():
        total = tf.constant(0.0)
        for x in dist_dataset:
            per_replica = strategy.run(tf.reduce_sum, args=(x,))
            total += strategy.reduce("SUM", per_replica, axis=None)
        return total

    assert float(loop()) == sum(range(8 * r))


def test_iterator_gives_each_replica_its_slice(strategy):
    # tpu_strategy_test.TPUStrategyDistributionTest.test_make_input_fn_iterable, with
    # experimental_distribute_dataset: range(10) in global batches of
    # num_replicas_in_sync; replica i of step k sees k * R + i.
    r = strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.range(10 * r).batch(r, drop_remainder=True)
    seen = []
    for x in strategy.experimental_distribute_dataset(dataset):
        out = strategy.run(lambda v: v * 1, args=(x,))
        seen.append([int(v[0]) for v in _local(strategy, out)])
    assert seen == [[k * r + i for i in range(r)] for k in range(10)]


def test_distribute_datasets_from_function(strategy):
    # strategy_test_lib.DistributionTestBase._test_input_fn_iterable with
    # distribute_datasets_from_function: one input pipeline, input_pipeline_id 0,
    # num_replicas_in_sync replicas; per-replica batches of 2 from a global batch of 2R.
    r = strategy.num_replicas_in_sync
    contexts = []

    def dataset_fn(ctx):
        contexts.append(ctx)
        batch = ctx.get_per_replica_batch_size(2 * r)
        return tf.data.Dataset.range(4 * r, output_type=tf.float32).batch(batch, drop_remainder=True)

    it = iter(strategy.distribute_datasets_from_function(dataset_fn))
    assert [(c.num_input_pipelines, c.input_pipeline_id, c.num_replicas_in_sync)
            for c in contexts] == [(1, 0, r)]
    out = strategy.run(tf.reduce_sum, args=(next(it),))
    # one input pipeline feeds the replicas in turn: replica i gets batch i, [2i, 2i+1]
    assert [float(v) for v in _local(strategy, out)] == [4.0 * i + 1.0 for i in range(r)]


def test_distribute_values_from_function(strategy):
    # strategy_common_test.DistributeValuesFromFunctionTest / values_test: value_fn gets
    # each replica's ValueContext; run sees replica i's value on replica i.
    r = strategy.num_replicas_in_sync
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant([float(ctx.replica_id_in_sync_group)] * 2)
    )
    out = strategy.run(lambda v: v * 10.0, args=(values,))
    assert [v.tolist() for v in _local(strategy, out)] == [[10.0 * i] * 2 for i in range(r)]


# ---------------------------------------------------------------- variables


def test_variable_created_in_scope_read_in_step(strategy):
    # tpu_strategy_test.TPUStrategyTest.test_function_compile_with_xla: v = 1.0 made in
    # scope; v.read_value() + 1.0 in the step is 2.0.
    with strategy.scope():
        v = tf.Variable(1.0)

    @tf.function
    def func():
        return strategy.run(lambda: v.read_value() + 1.0)

    assert [float(x) for x in _local(strategy, func())] == [2.0] * strategy.num_replicas_in_sync


def test_control_output_in_while_body_fn(strategy):
    # tpu_strategy_test.TPUStrategyTest.test_control_output_in_while_body_fn: a MEAN
    # variable, v.assign_add(1) in a step with no outputs, run twice in a tf.range loop
    # inside tf.function: v is 2.0.
    with strategy.scope():
        v = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)

    @tf.function
    def train_step():
        def step_fn():
            v.assign_add(1)

        for _ in tf.range(2):
            strategy.run(step_fn)

    train_step()
    assert float(v.numpy()) == 2.0


def test_one_write_and_no_outputs_eagerly(strategy):
    # tpu_strategy_test.TPUStrategyTest.test_control_output_in_while_body_fn, eager
    # form: a step whose only effect is one assign_add, run twice without tf.function.
    with strategy.scope():
        u = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)

    def bump():
        u.assign_add(1.0)

    assert strategy.run(bump) is None
    strategy.run(bump)
    assert float(u.numpy()) == 2.0


def test_constraint(strategy):
    # tpu_strategy_test.TPUStrategyDistributionTest.test_constraint: assign_add then
    # assign the constraint's result; the constraint maps everything to 1.
    # at 2 cores per replica each replica's component is a TPUReplicatedVariable, which has
    # no value() under TPUStrategy either (NotImplementedError): read_value() instead
    with strategy.scope():
        variable = tf.Variable(initial_value=2.0, constraint=lambda x: 0.0 * x + 1.0)
    assert variable.read_value().numpy() == 2

    @tf.function
    def update_variable():
        def step():
            variable.assign_add(1)
            variable.assign(variable.constraint(variable))

        strategy.run(step)

    update_variable()
    assert variable.read_value().numpy() == 1


def test_assign_and_read_after_write_in_step(strategy):
    # values_test.MirroredVariableTest (assign / assign_add / read after write in
    # replica context) with ONLY_FIRST_REPLICA aggregation: every replica writes the
    # same value; the read after the write sees it.
    with strategy.scope():
        v = tf.Variable(5.0, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def step():
        v.assign(1.0)
        v.assign_add(2.0)
        return v.read_value()

    out = strategy.run(step)
    assert [float(x) for x in _local(strategy, out)] == [3.0] * strategy.num_replicas_in_sync
    assert float(v.numpy()) == 3.0
    out = tf.function(lambda: strategy.run(step))()
    assert float(v.numpy()) == 3.0


def test_mean_aggregated_assign_from_per_replica_values(strategy):
    # values_test.MirroredVariableTest.testAssignPerReplicaVal-style: replica i assigns
    # i + 1 to a MEAN variable; the variable becomes the mean over replicas.
    r = strategy.num_replicas_in_sync
    with strategy.scope():
        v = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)

    def step():
        ctx = tf.distribute.get_replica_context()
        v.assign(tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0)
        return tf.constant(0.0)

    strategy.run(step)
    assert float(v.numpy()) == (r + 1) / 2


def test_assign_with_batch_sized_argument(strategy):
    # values_test.MirroredVariableTest assign in replica context with a value from the
    # input: strategy.run(w.assign, args=(x,)) with ONLY_FIRST_REPLICA aggregation.
    r = strategy.num_replicas_in_sync
    with strategy.scope():
        w = tf.Variable(tf.zeros([4, 3]), aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    dataset = tf.data.Dataset.from_tensor_slices(tf.ones([4 * r, 3])).batch(
        4 * r, drop_remainder=True)
    x = next(iter(strategy.experimental_distribute_dataset(dataset)))
    strategy.run(w.assign, args=(x,))
    assert w.numpy().tolist() == [[1.0] * 3] * 4


def test_keras_optimizer_in_step(strategy):
    # strategy_test_lib.DistributionTestBase._test_minimize_loss_eager-style, with a
    # Keras optimizer: loss = w * x summed over the global batch, SGD(lr=0.1): the
    # gradients of all replicas are summed, so w moves by 0.1 * sum(x) per step.
    r = strategy.num_replicas_in_sync
    with strategy.scope():
        w = tf.Variable(1.0)
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build([w])
    dataset = tf.data.Dataset.from_tensors(tf.ones([2 * r])).repeat(2)
    it = iter(strategy.experimental_distribute_dataset(dataset))

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * x) / (2.0 * r)  # mean over the global batch
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    @tf.function
    def train_step():
        return strategy.run(step, args=(next(it),))

    train_step()
    train_step()
    # per-replica gradient 2 / (2r) = 1/r, summed over r replicas = 1: w = 1 - 2 * 0.1
    assert float(w.numpy()) == pytest.approx(0.8, abs=1e-6)


# ---------------------------------------------------------------- control flow


def test_cond_in_step(strategy):
    # Control flow in a replicated step (after tpu_strategy_test.TPUStrategyTest.
    # test_device_switch_case, which switches on a counter): tf.cond on an input;
    # both branches are taken across calls.
    def step(x):
        return tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0)

    pos = strategy.run(step, args=(tf.constant([1.0, 2.0]),))
    neg = strategy.run(step, args=(tf.constant([-1.0, -2.0]),))
    assert [v.tolist() for v in _local(strategy, pos)] == [[2.0, 4.0]] * strategy.num_replicas_in_sync
    assert [v.tolist() for v in _local(strategy, neg)] == [[-2.0, -3.0]] * strategy.num_replicas_in_sync


def test_while_loop_in_step(strategy):
    # strategy_test_lib / tpu_strategy_test while loops inside the replicated function:
    # tf.while_loop runs 5 times in the compiled step, writing a variable each time.
    with strategy.scope():
        v = tf.Variable(0.0, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def step(x):
        def body(i, acc):
            v.assign_add(1.0)
            return i + 1, acc + x

        _, acc = tf.while_loop(lambda i, _: i < 5, body, (tf.constant(0), tf.zeros_like(x)))
        return acc

    out = tf.function(lambda: strategy.run(step, args=(tf.constant(1.5),)))()
    assert [float(a) for a in _local(strategy, out)] == [7.5] * strategy.num_replicas_in_sync
    assert float(v.numpy()) == 5.0


def test_spatially_split_step_in_tf_function(strategy):
    # tpu_strategy_test (SPMD) experimental_split_to_logical_devices in a step: a
    # 2-way split input gives the same result as the whole one.
    x = tf.reshape(tf.range(16, dtype=tf.float32), [2, 8])

    def step(t):
        t = strategy.experimental_split_to_logical_devices(t, [1, 2])
        return tf.reduce_sum(t * t, axis=1)

    out = tf.function(lambda: strategy.run(step, args=(x,)))()
    want = tf.reduce_sum(x * x, axis=1).numpy().tolist()
    assert [v.tolist() for v in _local(strategy, out)] == [want] * strategy.num_replicas_in_sync


# ---------------------------------------------------------------- host work


def _scalar_events(logdir, tag):
    values = []
    for path in glob.glob(f"{logdir}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values.append((event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(values)


def test_summary_in_step_is_written_on_the_host(strategy, tmp_path):
    # TPUStrategy behaviour behind tpu_strategy_test's summary cases (tf.summary.scalar
    # inside strategy.run with a default writer, under tf.summary.record_if): the
    # summary op runs on the host and writes the step's value (replica 0's, once).
    writer = tf.summary.create_file_writer(str(tmp_path))
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant([1.0, 2.0]) + 10.0 * ctx.replica_id_in_sync_group)

    def step(x):
        tf.summary.scalar("loss", tf.reduce_sum(x), step=3)
        return x

    with writer.as_default(), tf.summary.record_if(True):
        tf.function(lambda: strategy.run(step, args=(values,)))()
    writer.flush()
    assert _scalar_events(str(tmp_path), "loss") == [(3, 3.0)]


def test_spmd_with_summary(strategy, tmp_path):
    # tpu_strategy_model_parallelism_test.test_spmd_with_summary: a tf.function step that
    # makes the writer default itself, writes a scalar at a variable step and advances
    # it; ten runs leave the step at 10 and the summaries on disk (replica 0's, once).
    writer = tf.summary.create_file_writer(str(tmp_path))
    with strategy.scope():
        step = tf.Variable(0, dtype=tf.int64)

    @tf.function
    def run():
        with writer.as_default():
            tf.summary.scalar("result", step * 2, step=step)
            step.assign_add(1)

    for _ in range(10):
        strategy.run(run, args=())
    assert int(step.numpy()) == 10
    writer.flush()
    assert _scalar_events(str(tmp_path), "result") == [(s, 2.0 * s) for s in range(10)]


def test_a_writer_entered_in_the_step_sets_the_default_step_and_record_if_holds(
        strategy, tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))

    def step_fn(x):
        with writer.as_default(step=7):
            tf.summary.scalar("sum", tf.reduce_sum(x))
            with tf.summary.record_if(False):
                tf.summary.scalar("skipped", tf.reduce_sum(x))
        return x

    tf.function(lambda: strategy.run(step_fn, args=(tf.constant([1.0, 2.0]),)))()
    writer.flush()
    assert _scalar_events(str(tmp_path), "sum") == [(7, 3.0)]
    assert _scalar_events(str(tmp_path), "skipped") == []


def test_outside_compilation_host_only_op(strategy):
    # tpu_strategy_test.TPUStrategyTest.test_composite_input_dynamic_shapes_outside_
    # compilation / tpu_outside_compilation_test: tpu.outside_compilation runs its
    # function on the host, so ops TPUs cannot compile (tf.py_function) work there. The
    # emulator compiles the whole step as one program: it refuses, saying why and what
    # to do; an outside_compilation of ops XLA compiles runs inline, as TF does off TPU.
    def host_fn(x):
        return tf.py_function(lambda t: t.numpy() * 3.0, [x], tf.float32)

    def step(x):
        y = tf.compat.v1.tpu.outside_compilation(host_fn, x)
        y.set_shape(x.shape)
        return y + 1.0

    with pytest.raises(CompileError, match=r"op EagerPyFunc .* is inside "
                       r"tpu.outside_compilation and has no XLA kernel\. TPUStrategy runs "
                       r"that function on the host.*Fix: do the host work before strategy.run"):
        strategy.run(step, args=(tf.constant([1.0, 2.0]),))

    def compilable(x):
        return tf.compat.v1.tpu.outside_compilation(lambda t: t * 3.0, x) + 1.0

    out = tf.function(lambda: strategy.run(compilable, args=(tf.constant([1.0, 2.0]),)))()
    assert [v.tolist() for v in _local(strategy, out)] == [[4.0, 7.0]] * strategy.num_replicas_in_sync


def test_all_reduce_on_sync_on_read_variable(strategy):
    # tpu_strategy_test.TPUStrategyTest.test_all_reduce_on_sync_on_read_variable: an
    # ON_READ, ONLY_FIRST_REPLICA variable w; replica i adds its input i to w, then
    # all_reduce(SUM, w) + x is data_sum + i on replica i; outside, w reads (0.,).
    r = strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.range(r, output_type=tf.float32).batch(r, drop_remainder=True)
    input_iterator = iter(strategy.experimental_distribute_dataset(dataset))
    with strategy.scope():
        w = tf.Variable((0.0,), shape=(1,), trainable=False,
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    @tf.function
    def run(iterator):
        def computation(x):
            w.assign(x + w)
            return w

        def all_reduce(x):
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce("SUM", w) + x

        outputs = strategy.run(computation, args=(next(iterator),))
        return strategy.experimental_local_results(strategy.run(all_reduce, args=(outputs,)))

    data_sum = sum(range(r))
    assert [v.numpy().tolist() for v in run(input_iterator)] == [[x + data_sum] for x in range(r)]
    assert w.read_value().numpy().tolist() == [0.0]


def test_compute_average_loss_in_step(strategy):
    # nn_impl compute_average_loss under a strategy (losses/util tests and
    # strategy_common_test): in replica context the per-example losses are summed and
    # divided by the global batch, per_replica_batch * num_replicas_in_sync.
    r = strategy.num_replicas_in_sync

    def step(per_example):
        return tf.nn.compute_average_loss(per_example)

    out = strategy.run(step, args=(tf.constant([2.0, 4.0, 6.0]),))
    assert [float(v) for v in _local(strategy, out)] == [12.0 / (3 * r)] * r
