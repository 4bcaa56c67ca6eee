import dataclasses

import pytest
import tensorflow as tf

from spatial_tf.topology import device_assignment, synthetic
from spatial_tf.topology.hosts import batch_hints, host_feeds, input_contexts


def _da(name, n):
    return device_assignment(synthetic(name), num_cores_per_replica=n)


@pytest.mark.parametrize(
    "name, n, pipelines, replicas_each",
    [
        ("v3-8", 1, 1, 8),
        ("v3-32", 1, 4, 8),
        ("v3-32", 8, 4, 1),
        ("v3-32", 16, 2, 1),  # a replica spans 2 hosts: only the host of core 0 feeds it
        ("v3-32", 32, 1, 1),
        ("v4-32", 4, 4, 1),
        ("v4-32", 8, 2, 1),
        ("v6e-16", 2, 4, 2),
    ],
)
def test_one_pipeline_per_host_that_feeds_replicas(name, n, pipelines, replicas_each):
    da = _da(name, n)
    feeds = host_feeds(da)
    assert len(feeds) == pipelines
    assert all(len(f.replicas) == replicas_each for f in feeds)
    fed = sorted(r for f in feeds for r in f.replicas)
    assert fed == list(range(da.num_replicas))  # every replica fed exactly once
    for f in feeds:
        for replica in f.replicas:
            assert da.host_device(replica, 0, job="worker").endswith(f"task:{f.task}/device:CPU:0")


def test_input_contexts_shard_a_dataset_across_pipelines():
    da = _da("v3-32", 8)
    contexts = input_contexts(da)
    assert [c.input_pipeline_id for c in contexts] == [0, 1, 2, 3]
    assert {c.num_input_pipelines for c in contexts} == {4}
    assert {c.num_replicas_in_sync for c in contexts} == {4}
    assert contexts[0].get_per_replica_batch_size(32) == 8

    def dataset_fn(ctx):
        ds = tf.data.Dataset.range(16).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(ctx.get_per_replica_batch_size(8))

    seen = [[int(v) for b in dataset_fn(c) for v in b] for c in contexts]
    assert sorted(v for s in seen for v in s) == list(range(16))
    assert all(len(s) == 4 for s in seen)


def test_batch_hints_for_a_pod_slice():
    lines = batch_hints(_da("v3-32", 16), global_batch_size=6)
    assert lines[0] == "global batch must be a multiple of 2 (num_replicas_in_sync)."
    assert lines[1] == (
        "2 input pipelines, one per host that feeds replicas, each feeding 1 replica: "
        "per-host batch = global_batch / 2 x 1."
    )
    assert lines[2].startswith("2 of 4 hosts run no input pipeline")
    assert lines[3] == "global batch 6: 3 per replica, 3 per host."


def test_batch_hints_flag_a_global_batch_that_does_not_divide():
    lines = batch_hints(_da("v3-8", 2), global_batch_size=10)
    assert lines[-1] == "global batch 10 is NOT a multiple of 4; use 8 or 12."


def test_host_feeds_needs_a_device_assignment():
    with pytest.raises(TypeError, match=r"device_assignment is 'v3-8' \(str\); expected a "
                       r"tf\.tpu\.experimental\.DeviceAssignment"):
        host_feeds("v3-8")


def test_host_feed_is_frozen_and_its_repr_leaves_out_the_input_context():
    feed = host_feeds(_da("v3-32", 8))[2]
    with pytest.raises(dataclasses.FrozenInstanceError):
        feed.task = 0
    assert repr(feed) == (
        "HostFeed(task=3, host_device='/job:worker/replica:0/task:3/device:CPU:0', "
        "replicas=(2,))"
    )


@pytest.mark.parametrize(
    "name, n, batch, hint",
    [
        # 4 replicas; 13 = 3 x 4 + 1, so the neighbouring multiples are 12 and 16.
        ("v3-8", 2, 13, "global batch 13 is NOT a multiple of 4; use 12 or 16."),
        ("v3-8", 2, 3, "global batch 3 is NOT a multiple of 4; use 4."),
        # v3-8, 4 cores per replica: one host feeds both replicas, so it reads 2 x 8.
        ("v3-8", 4, 16, "global batch 16: 8 per replica, 16 per host."),
        # v6e-16, 2 cores per replica: 8 replicas, 2 per host.
        ("v6e-16", 2, 24, "global batch 24: 3 per replica, 6 per host."),
    ],
)
def test_batch_hints_global_batch_line(name, n, batch, hint):
    assert batch_hints(_da(name, n), global_batch_size=batch)[-1] == hint
