"""The emulator's hosts against TensorFlow's own multi-host strategy.

``MultiWorkerMirroredStrategy`` with one process per host (``multi_worker_loop.py``) is
how TensorFlow itself runs one program over several hosts' input pipelines on CPU. The
same float64 loop on ``Emulator(2, num_replicas=H, num_hosts=H)`` must hand every replica
the same examples and reach the same losses and weights, to rounding.
"""
import numpy as np
import pytest

import spatial_tf

import multi_worker_loop

pytestmark = pytest.mark.emulator


@pytest.mark.parametrize("hosts,route", [
    (2, "dataset_fn"), (2, "global dataset"),
    # a cluster of four processes each (twice the CPU): tools/extended_tests.py runs these
    pytest.param(4, "dataset_fn", marks=pytest.mark.extended),
    pytest.param(4, "global dataset", marks=pytest.mark.extended)])
def test_each_replica_sees_what_multi_worker_mirrored_feeds_it_and_trains_alike(hosts, route):
    cluster = multi_worker_loop.run_cluster(hosts, route)
    emulated = multi_worker_loop.train(
        spatial_tf.Emulator(2, num_replicas=hosts, num_hosts=hosts), route)

    assert emulated["seen"] == cluster["seen"]
    everything = sorted(i for step in cluster["seen"] for replica in step for i in replica)
    assert len(everything) == len(set(everything)) == multi_worker_loop.STEPS * 2 * hosts
    assert all(w["kernel"] == cluster["kernel"] for w in cluster["workers"])  # in sync
    np.testing.assert_allclose(emulated["loss"], cluster["loss"], rtol=1e-12)
    np.testing.assert_allclose(emulated["kernel"], cluster["kernel"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(emulated["dense"], cluster["dense"], rtol=0, atol=1e-12)
    assert cluster["loss"][-1] < cluster["loss"][0]   # it trains
