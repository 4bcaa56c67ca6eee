"""Variables made in the emulator's scope are the distributed variables TPUStrategy makes.

``spatial_tf.tpu_strategy`` builds ``TPUStrategy(..., experimental_spmd_xla_partitioning=
True)``, whose scope makes ``TPUMirroredVariable`` (ON_WRITE) and ``TPUSyncOnReadVariable``
(ON_READ) with one component per replica, each a ``TPUReplicatedVariable`` over the
replica's cores when it has several. What user code sees of them is checked here against
TensorFlow's own classes, and what they hold after reads and writes in both contexts,
for every synchronization and aggregation, against ``MirroredStrategy`` over virtual
CPUs (the oracle: TensorFlow's distributed variables unpartitioned, no TPU needed).
"""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import tpu_replicated_variable, tpu_values

pytestmark = pytest.mark.emulator

ON_READ, ON_WRITE = tf.VariableSynchronization.ON_READ, tf.VariableSynchronization.ON_WRITE
AGG = tf.VariableAggregation
LAYOUTS = [(1, 1), (2, 1), (1, 2), (2, 4)]  # (cores per replica, replicas)


def _ids(layout):
    return f"cores{layout[0]}-replicas{layout[1]}"


@pytest.fixture(scope="module")
def mirrored(virtual_cpus):
    return tf.distribute.MirroredStrategy(
        virtual_cpus[:2], cross_device_ops=tf.distribute.ReductionToOneDevice())


def _values(variable):
    """Every component's value: what each replica holds."""
    return [np.asarray(tf.convert_to_tensor(c)).tolist() for c in variable.values]


# ---------------------------------------------------------------- what user code sees


@pytest.mark.parametrize("layout", LAYOUTS, ids=_ids)
def test_classes_and_components_are_tpu_strategys(emulators, layout):
    cores, replicas = layout
    emulator = emulators(cores, replicas)
    with emulator.scope():
        mirrored = tf.Variable([1.0, 2.0], name="w")
        on_read = tf.Variable(0.0, synchronization=ON_READ, aggregation=AGG.SUM)
    assert type(mirrored) is tpu_values.TPUMirroredVariable
    assert type(on_read) is tpu_values.TPUSyncOnReadVariable
    for v in (mirrored, on_read):
        assert isinstance(v, tf.distribute.DistributedValues) and isinstance(v, tf.Variable)
        assert len(v.values) == replicas
        assert all(a is b for a, b in zip(emulator.experimental_local_results(v), v.values))
        for component in v.values:
            if cores == 1:
                assert type(component) is type(tf.Variable(0.0))  # a ResourceVariable
            else:
                assert isinstance(component, tpu_replicated_variable.TPUReplicatedVariable)
                assert len(component.variables) == cores
    assert mirrored.values[0].name.startswith("w")
    assert mirrored._is_replicated_or_sharded_to_logical_cores() == (cores > 1)
    assert _values(mirrored) == [[1.0, 2.0]] * replicas


def test_synchronization_none_is_refused_as_tpu_strategy_refuses_it(emulators):
    with emulators(1, 2).scope(), pytest.raises(
            ValueError, match="`NONE` variable synchronization mode is not supported"):
        tf.Variable(0.0, synchronization=tf.VariableSynchronization.NONE)


@pytest.mark.parametrize("layout", [(1, 2), (2, 2)], ids=_ids)
def test_colocate_vars_with_makes_the_same_copies(emulators, layout):
    emulator = emulators(*layout)
    with emulator.scope():
        v = tf.Variable(1.0)
        with emulator.extended.colocate_vars_with(v):
            w = tf.Variable(2.0)
    assert type(w) is type(v) and len(w.values) == len(v.values)
    assert _values(w) == [2.0] * layout[1]
    outside = tf.Variable(0.0)
    with emulator.scope(), pytest.raises(ValueError, match="colocate_vars_with"):
        with emulator.extended.colocate_vars_with(outside):
            pass


def test_each_cores_entry_of_a_replica_holds_the_replicas_copy(emulators):
    emulator = emulators(2, 4)
    with emulator.scope():
        v = tf.Variable(0.0)  # aggregation NONE: each replica writes its own copy

    def step():
        ctx = tf.distribute.get_replica_context()
        v.assign_add(tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0)

    emulator.run(step)
    for r, component in enumerate(v.values):
        assert [float(c) for c in component.variables] == [r + 1.0] * 2


@pytest.mark.parametrize("layout", [(1, 4), (2, 4)], ids=_ids)
def test_the_program_takes_one_copy_of_each_variable(emulators, layout):
    emulator = emulators(*layout)
    with emulator.scope():
        ws = [tf.Variable(tf.ones([4, 4])), tf.Variable(0.0),
              tf.Variable(0.0, synchronization=ON_READ, aggregation=AGG.SUM)]

    def step(x):
        ws[1].assign_add(tf.reduce_sum(x))
        ws[2].assign_add(1.0)
        return tf.matmul(x, ws[0])

    traced = emulator.lower(step, (tf.ones([2, 4]),)).traced
    assert len(traced.captures) == 3
    assert len(traced.module.host_program_shape.parameters) == 1 + 3


# ---------------------------------------------------------------- reads and writes


CASES = [(ON_WRITE, a) for a in (AGG.NONE, AGG.SUM, AGG.MEAN, AGG.ONLY_FIRST_REPLICA)] + [
    (ON_READ, a) for a in (AGG.SUM, AGG.MEAN, AGG.ONLY_FIRST_REPLICA)]


def _outcome(fn):
    try:
        result = fn()
    except (ValueError, TypeError, NotImplementedError) as e:
        return type(e).__name__
    return None if result is None else np.asarray(result).tolist()


def _replica_writes(strategy, v, method):
    """Replica r writes [1, 2] * (r + 1) with ``method`` and returns its read."""
    values = strategy.experimental_distribute_values_from_function(
        lambda c: tf.constant([1.0, 2.0]) * tf.cast(c.replica_id_in_sync_group + 1, tf.float32))

    def step(x):
        getattr(v, method)(x)
        return v.read_value()

    out = tf.function(lambda: strategy.run(step, args=(values,)))()
    return [t.numpy().tolist() for t in strategy.experimental_local_results(out)]


def _story(strategy, synchronization, aggregation):
    """What a variable holds after writes in a step and outside, read every way."""
    with strategy.scope():
        v = tf.Variable([1.0, 2.0], synchronization=synchronization, aggregation=aggregation)
    story = []
    for method in ("assign", "assign_add", "assign_sub"):
        story.append((method, _outcome(lambda: _replica_writes(strategy, v, method)),
                      _values(v), _outcome(v.read_value)))
    for method, value in (("assign", [5.0, 6.0]), ("assign_add", [1.0, 1.0]),
                          ("assign_sub", [2.0, 0.5])):
        story.append(("cross-replica " + method,
                      _outcome(lambda: getattr(v, method)(tf.constant(value)) and None),
                      _values(v), _outcome(v.read_value)))
    update = lambda var, x: var.assign_add(x)  # noqa: E731
    story.append(("extended.update",
                  _outcome(lambda: strategy.extended.update(v, update, args=(tf.constant(
                      [1.0, 1.0]),)) and None), _values(v), _outcome(v.read_value)))
    return story


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("synchronization, aggregation", CASES,
                         ids=[f"{s.name}-{a.name}" for s, a in CASES])
def test_reads_and_writes_in_both_contexts_as_mirrored_strategy(
        emulators, mirrored, cores, synchronization, aggregation):
    want = _story(mirrored, synchronization, aggregation)
    got = _story(emulators(cores, 2), synchronization, aggregation)
    for w, g in zip(want, got):
        assert g == w, w[0]  # small sums and means of halves: exact


def test_a_per_replica_update_writes_each_replicas_copy(emulators, mirrored):
    # distributed_variable_test.testStrategyExtendedUpdate, for an ON_READ variable. At
    # one core per replica: with several, TensorFlow's TPUReplicatedVariable component
    # reports synchronization NONE, so TPUStrategy (and the emulator) ask for mirrored
    # values here
    for strategy in (mirrored, emulators(1, 2)):
        with strategy.scope():
            v = tf.Variable(0.0, synchronization=ON_READ, aggregation=AGG.SUM)
        value = strategy.experimental_distribute_values_from_function(
            lambda c: tf.constant(1.0) + tf.cast(c.replica_id_in_sync_group, tf.float32))
        strategy.extended.update(v, lambda var, x: var.assign(x), args=(value,))
        assert _values(v) == [1.0, 2.0], strategy
        strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(value,))
        assert _values(v) == [2.0, 4.0], strategy


@pytest.mark.parametrize("layout", [(1, 2), (2, 2)], ids=_ids)
def test_sizes_known_only_at_run_time_feed_and_write_each_replicas_copy(emulators, layout):
    # a batch without drop_remainder: the step is compiled in the host call, which reads
    # and writes every replica's copy
    emulator = emulators(*layout)
    with emulator.scope():
        seen = tf.Variable(0.0)  # aggregation NONE: a copy per replica
    dataset = tf.data.Dataset.range(8, output_type=tf.float32).batch(4)
    iterator = iter(emulator.experimental_distribute_dataset(dataset))

    @tf.function
    def train_step():
        def step(x):
            seen.assign_add(tf.reduce_sum(x))
            return seen.read_value()

        return emulator.run(step, args=(next(iterator),))

    first = [float(t) for t in emulator.experimental_local_results(train_step())]
    second = [float(t) for t in emulator.experimental_local_results(train_step())]
    assert first == [1.0, 5.0] and _values(seen) == [1.0 + 9.0, 5.0 + 13.0] == second


@pytest.mark.parametrize("layout", [(1, 2), (2, 2)], ids=_ids)
def test_a_variable_passed_to_run_stays_the_distributed_variable(emulators, layout):
    # tpu_strategy_test.test_tpu_variable_run_argument: TPUStrategy.run keeps variables
    emulator = emulators(*layout)
    with emulator.scope():
        v = tf.Variable(1.0)
    seen = []

    def step(first, variable):
        seen.append(type(variable))
        variable.assign_add(first)
        return variable.read_value()

    out = tf.function(lambda: emulator.run(step, args=(tf.constant(2.0), v)))()
    assert seen == [tpu_values.TPUMirroredVariable]
    assert [float(t) for t in emulator.experimental_local_results(out)] == [3.0, 3.0]
    assert _values(v) == [3.0, 3.0]
