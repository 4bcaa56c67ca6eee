"""Several hosts: one input pipeline per host, replicas fed host by host, pod bugs caught.

The cases follow TensorFlow's own multi-worker input tests (input_lib_test.py:
``distribute_datasets_from_function`` with one ``InputContext`` per worker, and
``experimental_distribute_dataset`` auto-sharded across workers); the expected batches
are worked out by hand from those semantics.
"""
import warnings

import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.distribute.hosts import IdenticalHostInputWarning

pytestmark = pytest.mark.emulator


@pytest.fixture(scope="module")
def pod():
    return spatial_tf.Emulator(1, num_replicas=4, num_hosts=2)


def _batches(emulator, distributed, steps=2):
    it = iter(distributed)
    return [[t.numpy().tolist() for t in emulator.experimental_local_results(next(it))]
            for _ in range(steps)]


def test_dataset_fn_runs_once_per_host_and_each_host_feeds_its_replicas(pod):
    contexts = []

    def dataset_fn(context):
        contexts.append((context.input_pipeline_id, context.num_input_pipelines,
                         context.get_per_replica_batch_size(8)))
        return (tf.data.Dataset.range(64)
                .shard(context.num_input_pipelines, context.input_pipeline_id).batch(2))

    distributed = pod.distribute_datasets_from_function(dataset_fn)
    assert contexts == [(0, 2, 2), (1, 2, 2)]
    # host 0 reads 0, 2, 4, ...: replicas 0 and 1; host 1 reads 1, 3, 5, ...: replicas 2, 3
    assert _batches(pod, distributed) == [[[0, 2], [4, 6], [1, 3], [5, 7]],
                                          [[8, 10], [12, 14], [9, 11], [13, 15]]]


def test_a_global_dataset_is_sharded_across_hosts_by_its_auto_shard_policy(pod):
    dataset = tf.data.Dataset.range(64).batch(8, drop_remainder=True)
    # rebatched to per-replica batches of 2, then every other one to each host
    assert _batches(pod, pod.experimental_distribute_dataset(dataset)) == [
        [[0, 1], [4, 5], [2, 3], [6, 7]], [[8, 9], [12, 13], [10, 11], [14, 15]]]
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    unsharded = pod.experimental_distribute_dataset(dataset.with_options(options))
    first = _batches(pod, unsharded, steps=1)[0]
    assert first[:2] == first[2:]  # both hosts read the whole dataset


def _sum_step(x):
    return tf.reduce_sum(x)


def _run(emulator, distributed, graph):
    it = iter(distributed)
    run = lambda: emulator.run(_sum_step, args=(next(it),))  # noqa: E731
    run = tf.function(run) if graph else run
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            run()
    return [str(w.message) for w in record if w.category is IdenticalHostInputWarning]


@pytest.mark.parametrize("graph", [False, True])
def test_hosts_reading_the_same_examples_are_named_once_with_the_fix(graph):
    emulator = spatial_tf.Emulator(1, num_replicas=4, num_hosts=2)
    unsharded = emulator.distribute_datasets_from_function(
        lambda context: tf.data.Dataset.range(64).batch(2))
    [message] = _run(emulator, unsharded, graph)
    assert message.startswith("spatial_tf.Emulator: in the step '_sum_step', all 2 hosts fed "
                              "their replicas the same batches (hosts 0 to 1)")
    assert "dataset.shard(context.num_input_pipelines, context.input_pipeline_id)" in message
    fresh = spatial_tf.Emulator(1, num_replicas=4, num_hosts=2)
    assert repr(fresh) == "Emulator(num_cores_per_replica=1, num_replicas=4, num_hosts=2)"
    sharded = fresh.distribute_datasets_from_function(
        lambda c: tf.data.Dataset.range(64).shard(c.num_input_pipelines, c.input_pipeline_id)
        .batch(2))
    assert _run(fresh, sharded, graph) == []


def test_one_host_never_warns_and_replicated_arguments_are_not_compared(pod):
    single = spatial_tf.Emulator(1, num_replicas=4)
    data = single.distribute_datasets_from_function(lambda c: tf.data.Dataset.range(64).batch(2))
    assert _run(single, data, graph=False) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdenticalHostInputWarning)
        pod.run(_sum_step, args=(tf.ones([2]),))   # the same tensor for every replica


def test_hosts_whose_datasets_differ_are_refused_before_any_step(pod):
    def dataset_fn(context):   # a per-host batch computed wrongly on host 1
        return tf.data.Dataset.range(64).batch(2 + context.input_pipeline_id,
                                               drop_remainder=True)

    with pytest.raises(ValueError, match=r"distribute_datasets_from_function: host 1's dataset "
                       r"yields TensorSpec\(shape=\(3,\), .*but host 0's yields "
                       r"TensorSpec\(shape=\(2,\), .*Fix: batch with "
                       r"context.get_per_replica_batch_size"):
        pod.distribute_datasets_from_function(dataset_fn)


@pytest.mark.parametrize("replicas, hosts, message", [
    (4, 3, r"num_hosts=3 does not divide num_replicas=4; .* Fix: num_hosts a divisor of 4, "
           r"e\.g\. num_hosts=2\."),
    (4, 0, r"num_hosts"),
])
def test_hosts_that_cannot_share_the_replicas_are_refused(replicas, hosts, message):
    with pytest.raises(ValueError, match=message):
        spatial_tf.Emulator(1, num_replicas=replicas, num_hosts=hosts)


# ---------------------------------------------------------------- from a slice name
# v4-32: 16 chips (2x2x4, one TensorFlow device each), 4 hosts of 2x2x1 chips (z = task).
# Two cores per replica: TensorFlow's DeviceAssignment.build walks the z ring of the torus,
# so replicas 0..7 sit on tasks 0, 0, 1, 2, 3, 3, 2, 1 (the TPU describe table shows it).


@pytest.fixture(scope="module")
def v4_32():
    return spatial_tf.Emulator(2, topology="v4-32")


def test_a_slice_name_gives_its_replicas_hosts_and_the_host_of_each_core(v4_32):
    assert (v4_32.num_replicas, v4_32.num_hosts, v4_32.num_cores_per_replica) == (8, 4, 2)
    assert repr(v4_32) == ("Emulator(num_cores_per_replica=2, num_replicas=8, num_hosts=4, "
                           "topology='v4-32')")
    layout = v4_32.host_layout
    assert layout.replica_tasks == (0, 0, 1, 2, 3, 3, 2, 1)
    assert layout.pipeline_tasks == (0, 1, 2, 3)   # hosts in order of their first replica
    # TPUStrategy hands replica i the i-th batch of the hosts' pipelines, in host order
    assert layout.pipeline_of_replica == (0, 0, 1, 1, 2, 2, 3, 3)
    assert layout.fed_across_hosts() == (3, 4, 5, 6, 7)
    table = spatial_tf.describe(v4_32)
    assert "4 hosts with 2 replicas each) as on v4-32" in table
    assert "replicas 3, 4, 5, 6, 7 are fed by another task than their own" in table
    rows = [r for r in map(str.split, table.splitlines()) if len(r) == 5 and r[0].isdigit()]
    assert [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows[4:8]] == [
        (2, 1, 0, 1), (2, 1, 1, 1), (3, 1, 0, 2), (3, 1, 1, 2)]


def test_a_slice_name_feeds_every_host_its_own_pipeline(v4_32):
    contexts = []

    def dataset_fn(context):
        contexts.append((context.input_pipeline_id, context.num_input_pipelines))
        return tf.data.Dataset.range(64).shard(4, context.input_pipeline_id).batch(1)

    batches = _batches(v4_32, v4_32.distribute_datasets_from_function(dataset_fn), steps=1)
    assert contexts == [(0, 4), (1, 4), (2, 4), (3, 4)]
    # host h reads h, h + 4, ...; its two replicas take its first two batches
    assert batches == [[[0], [4], [1], [5], [2], [6], [3], [7]]]


def test_fewer_replicas_than_the_slice_holds_and_other_slices():
    assert spatial_tf.Emulator(2, num_replicas=2, topology="v4-32").num_hosts == 1
    one_per_host = spatial_tf.Emulator(8, topology="v3-32")
    assert one_per_host.host_layout.pipeline_tasks == (0, 1, 3, 2)
    assert one_per_host.host_layout.fed_across_hosts() == ()
    assert "are fed by another task" not in spatial_tf.describe(one_per_host)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(topology="v9-32"), ValueError,
     r"unknown slice 'v9-32'\. Known slices: v2-8, .*Fix: use one of these names"),
    (dict(topology="v4-32", num_hosts=2), ValueError,
     r"Emulator: num_hosts=2 but on v4-32 8 replicas of 2 cores are fed by 4 "
     r"hosts\. Fix: leave num_hosts out"),
    (dict(topology=32), TypeError,
     r"Emulator: topology is 32 \(int\); expected a slice name such as 'v4-32'"),
    (dict(topology="v4-32", num_replicas=9), ValueError, r"9"),
])
def test_topologies_the_emulator_cannot_take_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        spatial_tf.Emulator(2, **kwargs)
