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
from spatial_tf.emulator.hosts import IdenticalHostInputWarning

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
