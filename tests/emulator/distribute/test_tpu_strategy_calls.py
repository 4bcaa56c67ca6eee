"""What ``experimental_distribute_values_from_function``, ``run`` and
``extended.call_for_each_replica`` return and do, as TPUStrategy's
(``tensorflow/python/distribute/tpu_strategy.py``):

- ``experimental_distribute_values_from_function``: ``regroup(values, always_wrap=True)``,
  a ``PerReplica`` even of one replica's value; ``run`` returns ``regroup(outputs)``, a
  bare tensor with one replica, and so do a distributed dataset's elements. Both as
  ``MirroredStrategy`` over the same number of virtual CPUs (the oracle here), which
  regroups the same way.
- ``run`` passes per-replica Python numbers to the step as tensors (``tpu.replicate``
  converts its inputs), each replica its own.
- ``extended.call_for_each_replica`` calls the function once, now, in replica 0's context
  (``TPUExtended._call_for_each_replica``): variables it creates are the scope's
  ``TPUMirroredVariable`` / ``TPUSyncOnReadVariable``, returned as such.
- ``run`` inside a ``tf.function(jit_compile=True)`` is refused in one line: the
  emulated step is a host call, which XLA cannot compile into that function.
"""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import tpu_values

pytestmark = pytest.mark.emulator

LAYOUTS = [(1, 1), (1, 2), (2, 2)]  # (cores per replica, replicas)


def _ids(layout):
    return f"cores{layout[0]}-replicas{layout[1]}"


@pytest.fixture(scope="module")
def mirrored(virtual_cpus):
    """``mirrored(replicas)``: MirroredStrategy over that many virtual CPUs."""
    made = {}

    def get(replicas):
        if replicas not in made:
            made[replicas] = tf.distribute.MirroredStrategy(
                virtual_cpus[:replicas], cross_device_ops=tf.distribute.ReductionToOneDevice())
        return made[replicas]

    return get


def _local(strategy, value):
    return [np.asarray(v).tolist() for v in strategy.experimental_local_results(value)]


# ------------------------------------------------------- what comes back per replica


@pytest.mark.parametrize("replicas", [1, 2])
def test_values_from_function_are_per_replica_even_at_one_replica(emulators, mirrored,
                                                                   replicas):
    def value_fn(context):
        return {"id": context.replica_id_in_sync_group,
                "x": tf.fill([2], float(context.replica_id_in_sync_group))}

    for strategy in (emulators(1, replicas), mirrored(replicas)):
        values = strategy.experimental_distribute_values_from_function(value_fn)
        assert isinstance(values["id"], tf.distribute.DistributedValues)
        assert isinstance(values["x"], tf.distribute.DistributedValues)
        assert values["id"].values == tuple(range(replicas))
        assert _local(strategy, values["x"]) == [[float(r)] * 2 for r in range(replicas)]


def test_one_replica_run_results_and_dataset_elements_are_bare(emulators, mirrored):
    dataset = tf.data.Dataset.from_tensors(tf.ones([4]))
    for strategy in (emulators(1, 1), mirrored(1)):
        batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
        assert not isinstance(batch, tf.distribute.DistributedValues)
        out = strategy.run(lambda x: x * 2.0, args=(batch,))
        assert not isinstance(out, tf.distribute.DistributedValues)
        assert _local(strategy, out) == [[2.0] * 4]
        one = strategy.experimental_distribute_values_from_function(lambda c: tf.ones([2]))
        assert isinstance(one, tf.distribute.DistributedValues)
        assert not isinstance(strategy.run(tf.square, args=(one,)),
                              tf.distribute.DistributedValues)


# ------------------------------------------------------- per-replica Python values


@pytest.mark.parametrize("layout", LAYOUTS, ids=_ids)
def test_run_takes_per_replica_python_numbers_as_tensors(emulators, mirrored, layout):
    emulator = emulators(*layout)
    replicas = layout[1]
    for strategy in (emulator, mirrored(replicas)):
        ids = strategy.experimental_distribute_values_from_function(
            lambda c: c.replica_id_in_sync_group)
        scales = strategy.experimental_distribute_values_from_function(
            lambda c: 0.5 * (c.replica_id_in_sync_group + 1))
        assert _local(strategy, strategy.run(tf.square, args=(ids,))) == [
            r * r for r in range(replicas)]
        step = tf.function(lambda: strategy.run(lambda i, s: tf.cast(i, tf.float32) * s,
                                                args=(ids, scales)))
        assert _local(strategy, step()) == [r * 0.5 * (r + 1) for r in range(replicas)]


# ------------------------------------------------------- call_for_each_replica


@pytest.mark.parametrize("layout", LAYOUTS, ids=_ids)
def test_call_for_each_replica_calls_once_in_replica_zero_and_returns_the_variable(
        emulators, layout):
    emulator = emulators(*layout)
    calls = []

    def model_fn(scale):
        context = tf.distribute.get_replica_context()
        calls.append(context.replica_id_in_sync_group)
        w = tf.Variable(2.0 * scale, name="w")
        s = tf.Variable(1.0, name="s", synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.SUM)
        assert context.merge_call(lambda strategy: strategy) is emulator
        return w, s, w * 3.0

    with emulator.scope():
        w, s, product = emulator.extended.call_for_each_replica(model_fn, args=(2.0,))
        got = tf.compat.v1.get_variable("g", [1])
        from_get = emulator.extended.call_for_each_replica(
            lambda: tf.compat.v1.get_variable("h", [1]))
    assert calls == [0]  # once, in replica 0's context, with the replica id a Python int
    assert type(w) is tpu_values.TPUMirroredVariable
    assert type(s) is tpu_values.TPUSyncOnReadVariable
    assert type(from_get) is type(got) is tpu_values.TPUMirroredVariable
    assert len(w.values) == len(s.values) == layout[1]
    assert [float(tf.convert_to_tensor(c)) for c in w.values] == [4.0] * layout[1]
    assert float(s.read_value()) == 1.0 * layout[1]  # SUM over the replicas' copies
    assert float(product) == 12.0  # an eager tensor, not a compiled step's output


def test_call_for_each_replica_creates_what_mirrored_strategy_creates(emulators, mirrored):
    def model_fn():
        with tf.compat.v1.variable_scope("common"):
            v = tf.compat.v1.get_variable("v", [2], initializer=tf.ones_initializer())
        tf.distribute.get_replica_context().merge_call(lambda _: _)
        return v

    made = []
    for strategy in (emulators(1, 2), mirrored(2)):
        with strategy.scope():
            v = strategy.extended.call_for_each_replica(model_fn)
        made.append((v.name, _local(strategy, v), v.synchronization, v.aggregation))
    assert made[0] == made[1]


def test_call_for_each_replica_inside_a_step_calls_in_the_program(emulators):
    """Keras' LossScaleOptimizer calls it in a merge_call of the step."""
    emulator = emulators(1, 2)

    def step(x):
        def merge(strategy, x):
            return strategy.extended.call_for_each_replica(
                lambda y: tf.reduce_all(tf.math.is_finite(y)), args=(x,))

        finite = tf.distribute.get_replica_context().merge_call(merge, args=(x,))
        return tf.cast(finite, tf.float32) * tf.reduce_sum(x)

    values = emulator.experimental_distribute_values_from_function(
        lambda c: tf.fill([2], float(c.replica_id_in_sync_group + 1)))
    assert _local(emulator, emulator.run(step, args=(values,))) == [2.0, 4.0]


# ------------------------------------------------------- run inside jit_compile=True


def test_run_inside_jit_compile_is_refused_in_one_line(emulators):
    emulator = emulators(1, 2)

    def step_fn(x):
        return x * 2.0

    @tf.function(jit_compile=True)
    def train_step(x):
        return emulator.run(step_fn, args=(x,))

    with pytest.raises(RuntimeError) as raised:
        train_step(tf.ones([2]))
    message = str(raised.value).strip().splitlines()[-1]
    assert "strategy.run(step_fn) is called inside a tf.function(jit_compile=True)" in message
    assert ("Fix: call strategy.run outside jit_compile=True; TPUStrategy compiles the step "
            "itself") in message
    # the step itself may be jit_compile=True, and the function calling run need not be
    jit_step = tf.function(step_fn, jit_compile=True)
    assert _local(emulator, tf.function(lambda x: emulator.run(jit_step, args=(x,)))(
        tf.ones([2]))) == [[2.0, 2.0]] * 2
