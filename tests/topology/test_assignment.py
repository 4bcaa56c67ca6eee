import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.topology import SLICES, choose, device_assignment, synthetic
from spatial_tf.topology.shapes import valid_core_counts

# Written out by hand, not computed: every named slice's chip mesh has power-of-two sides,
# so every power of two up to its core count (as TensorFlow counts devices: 2 per v2/v3
# chip, 1 per v4/v5p/v5e/v6e chip), capped at TPUConfig's 128, tiles it.
LARGEST_CORE_COUNT = {
    "v2-8": 8, "v2-32": 32,
    "v3-8": 8, "v3-32": 32, "v3-64": 64, "v3-128": 128, "v3-256": 128,  # 256 cores, cap 128
    "v4-8": 4, "v4-16": 8, "v4-32": 16, "v4-64": 32,
    "v5p-8": 4, "v5p-16": 8, "v5p-32": 16,
    "v5litepod-4": 4, "v5litepod-8": 8, "v5litepod-16": 16,
    "v6e-4": 4, "v6e-8": 8, "v6e-16": 16, "v6e-32": 32,
}
VALID_CORE_COUNTS = {
    name: [2**i for i in range(8) if 2**i <= largest]
    for name, largest in LARGEST_CORE_COUNT.items()
}
CASES = [(name, n) for name, counts in VALID_CORE_COUNTS.items() for n in counts]


def test_the_case_table_covers_every_slice():
    assert len(CASES) == 103
    assert set(VALID_CORE_COUNTS) == set(SLICES)


@pytest.mark.parametrize("name", sorted(LARGEST_CORE_COUNT))
def test_valid_core_counts_match_the_table(name):
    assert valid_core_counts(synthetic(name)) == VALID_CORE_COUNTS[name]

# TPUEstimator's table (tensorflow_estimator/python/estimator/tpu/tpu_context.py), written
# for a 3D (x, y, core) mesh; with today's 4D mesh it reads [x, y, 1, core].
TPU_ESTIMATOR = {
    1: [1, 1, 1], 2: [1, 1, 2], 4: [1, 2, 2], 8: [2, 2, 2],
    16: [4, 2, 2], 32: [4, 4, 2], 64: [8, 4, 2], 128: [8, 8, 2],
}


def _as_4d(x_y_core):
    x, y, core = x_y_core
    return (x, y, 1, core)


def _chip_links(coords):
    """Neighbouring pairs among a replica's cores: same chip, or chips one hop apart."""
    links = 0
    for a, b in itertools.combinations(coords, 2):
        chip_distance = sum(abs(int(p) - int(q)) for p, q in zip(a[:3], b[:3]))
        links += chip_distance == 1 or (chip_distance == 0)
    return links


def _best_possible_links(mesh, n):
    """Brute force over every box of n cores that fits the mesh."""
    best = 0
    for shape in itertools.product(*(range(1, m + 1) for m in mesh)):
        if math.prod(shape) == n:
            block = list(itertools.product(*(range(s) for s in shape)))
            best = max(best, _chip_links(block))
    return best


@pytest.mark.parametrize("name, n", CASES)
def test_every_slice_and_core_count_gives_disjoint_compact_blocks(name, n):
    topology = synthetic(name)
    choice = choose(topology, num_cores_per_replica=n)
    da = choice.device_assignment()
    total = int(np.prod(topology.mesh_shape))

    assert isinstance(da, tf.tpu.experimental.DeviceAssignment)
    assert da.num_cores_per_replica == n
    assert da.num_replicas == choice.num_replicas == total // n  # default: all that fit
    flat = [tuple(c) for c in da.core_assignment.reshape(-1, 4)]
    assert len(set(flat)) == len(flat) == total  # each physical core used exactly once

    for replica in da.core_assignment:
        lo, hi = replica.min(axis=0), replica.max(axis=0)
        extent = tuple(int(e) for e in hi - lo + 1)
        assert extent == choice.computation_shape  # a box of exactly that shape...
        box = set(itertools.product(*(range(a, b + 1) for a, b in zip(lo, hi))))
        assert {tuple(c) for c in replica} == box  # ...with no holes
        # ...and no other box of n cores has more neighbouring pairs.
        assert _chip_links(replica) == _best_possible_links(topology.mesh_shape, n)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_v3_8_matches_tpu_estimator_table(n):
    # On v3-8 the table is right for every count that fits: the same shapes come out.
    assert choose(synthetic("v3-8"), num_cores_per_replica=n).computation_shape == _as_4d(
        TPU_ESTIMATOR[n]
    )


@pytest.mark.parametrize("name, n", [("v3-32", 16), ("v3-128", 64), ("v3-256", 64)])
def test_where_the_table_differs_on_v3_pods_it_is_an_equally_compact_tie(name, n):
    topology = synthetic(name)
    ours = choose(topology, num_cores_per_replica=n)
    table = choose(topology, computation_shape=_as_4d(TPU_ESTIMATOR[n]))
    assert ours.computation_shape != table.computation_shape
    assert sorted(ours.computation_shape) == sorted(table.computation_shape)  # transposed
    assert "equally compact" in ours.reason
    assert ours.num_replicas == table.num_replicas


@pytest.mark.parametrize("name", ["v3-32", "v3-128", "v3-256"])
def test_v3_pod_slices_match_the_table_for_other_counts(name):
    topology = synthetic(name)
    for n in VALID_CORE_COUNTS[name]:
        if n in (16, 64):
            continue
        shape = choose(topology, num_cores_per_replica=n).computation_shape
        assert shape == _as_4d(TPU_ESTIMATOR[n])


@pytest.mark.parametrize("name", ["v4-8", "v5p-8", "v5litepod-8", "v6e-8"])
def test_table_is_wrong_for_one_core_per_chip_and_the_chooser_is_not(name):
    topology = synthetic(name)
    with pytest.raises(ValueError, match="does not fit in TPU topology shape"):
        tf.tpu.experimental.DeviceAssignment.build(
            topology, computation_shape=_as_4d(TPU_ESTIMATOR[4]), num_replicas=1
        )
    assert choose(topology, num_cores_per_replica=4).computation_shape == (2, 2, 1, 1)


def test_v4_32_keeps_a_replica_on_one_host_when_it_can():
    topology = synthetic("v4-32")
    da = device_assignment(topology, num_cores_per_replica=4)
    for replica in range(da.num_replicas):
        tasks = {da.host_device(replica, core) for core in range(4)}
        assert len(tasks) == 1
    assert "1 host per replica" in choose(topology, num_cores_per_replica=4).reason


def test_reason_explains_the_choice():
    choice = choose(synthetic("v3-8"), num_cores_per_replica=2)
    assert choice.reason.startswith("most compact block: 2 cores as a 1x1x1 block")
    assert "all 2 cores of each chip" in choice.reason
    assert "next best [1, 2, 1, 1] (splits chips' cores across replicas)" in choice.reason
    assert choice.alternatives == ((1, 2, 1, 1), (2, 1, 1, 1))


def test_given_computation_shape_is_used_as_is():
    choice = choose(synthetic("v3-32"), computation_shape=[4, 1, 1, 2])
    assert choice.computation_shape == (4, 1, 1, 2)
    assert choice.reason.startswith("requested: 8 cores")
    assert choice.num_replicas == 4


def test_fewer_replicas_than_fit():
    topology = synthetic("v3-32")
    choice = choose(topology, num_cores_per_replica=4, num_replicas=3)
    da = choice.device_assignment()
    assert da.num_replicas == 3
    flat = [tuple(c) for c in da.core_assignment.reshape(-1, 4)]
    assert len(set(flat)) == 12
    assert "3 used (20 cores idle)" in choice.reason


def test_computation_stride_is_passed_through_to_tensorflow():
    topology = synthetic("v3-32")
    ours = device_assignment(
        topology, computation_shape=[2, 1, 1, 2], computation_stride=[2, 1, 1, 1]
    )
    theirs = tf.tpu.experimental.DeviceAssignment.build(
        topology, computation_shape=[2, 1, 1, 2], computation_stride=[2, 1, 1, 1],
        num_replicas=8,
    )
    np.testing.assert_array_equal(ours.core_assignment, theirs.core_assignment)


def test_real_topology_without_a_name_is_labelled_by_its_mesh():
    plain = tf.tpu.experimental.Topology(serialized=synthetic("v3-8").serialized())
    with pytest.raises(
        ValueError,
        match=r"^this TPU slice \(mesh_shape \[2, 2, 1, 2\]\) has 8 cores; "
        r"num_cores_per_replica=16 does not fit\. Valid values for this TPU slice",
    ):
        choose(plain, num_cores_per_replica=16)


# ---------------------------------------------------------------- impossible requests


@pytest.mark.parametrize(
    "name, n, message",
    [
        ("v3-8", 16, r"v3-8 has 8 cores; num_cores_per_replica=16 does not fit\. "
                     r"Valid values for v3-8: 1, 2, 4, 8\. Fix: pass one of these, or use a "
                     r"larger slice\."),
        ("v6e-16", 6, r"v6e-16: num_cores_per_replica=6 is not a positive power of two\. "
                      r"Valid values for v6e-16: 1, 2, 4, 8, 16\. Fix: pass one of these\."),
        ("v3-8", -4, r"v3-8: num_cores_per_replica=-4 is not a positive power of two\. "
                     r"Valid values for v3-8: 1, 2, 4, 8\. Fix: pass one of these\."),
        ("v3-256", 256, r"v3-256: num_cores_per_replica=256 is more than 128, the most "
                        r"TPUConfig allows per replica\. Valid values for v3-256: 1, 2, 4, "
                        r"8, 16, 32, 64, 128\. Fix: pass one of these\."),
    ],
)
def test_impossible_core_counts_name_the_slice_and_the_valid_values(name, n, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        choose(synthetic(name), num_cores_per_replica=n)


def test_cores_that_do_not_divide_the_slice():
    # A slice of 2x3 chips: no block of 4 cores tiles it.
    coords = [[[x, y, 0, 0] for y in range(3) for x in range(2)]]
    odd = tf.tpu.experimental.Topology(mesh_shape=[2, 3, 1, 1], device_coordinates=coords)
    with pytest.raises(
        ValueError,
        match=r"no block of 4 cores tiles mesh_shape \[2, 3, 1, 1\].*"
        r"Valid values for this TPU slice \(mesh_shape \[2, 3, 1, 1\]\): 1, 2\. "
        r"Fix: pass one of these, or another computation_stride\.$",
    ):
        choose(odd, num_cores_per_replica=4)
    with pytest.raises(
        ValueError,
        match=r"computation_shape=\[1, 2, 1, 1\] does not fit mesh_shape \[2, 3, 1, 1\].*"
        r"axis y \(3\) is not a multiple of 2, so 1 of every 3 would sit idle\. "
        r"Valid computation shapes with 2 cores for .*: \[2, 1, 1, 1\]\. Fix: pass one of "
        r"these, or num_cores_per_replica=2 to let the shape be chosen\.$",
    ):
        choose(odd, computation_shape=[1, 2, 1, 1])


def test_shape_that_does_not_fit_names_the_axis_and_the_alternatives():
    # The shape from TensorFlow's own experimental_split_to_logical_devices docstring.
    with pytest.raises(
        ValueError,
        match=r"^v3-8: computation_shape=\[1, 2, 2, 2\] does not fit mesh_shape "
        r"\[2, 2, 1, 2\] \(computation_stride \[1, 1, 1, 1\]\): axis z needs 2 but the "
        r"slice has 1\. Valid computation shapes with 8 cores for v3-8: \[2, 2, 1, 2\]\. "
        r"Fix: pass one of these, or num_cores_per_replica=8 to let the shape be chosen\.$",
    ):
        choose(synthetic("v3-8"), computation_shape=[1, 2, 2, 2])


def test_shape_with_a_core_count_that_is_not_a_power_of_two():
    with pytest.raises(ValueError, match=r"has 6 cores per replica; expected a power of two"):
        choose(synthetic("v3-32"), computation_shape=[3, 1, 1, 2])


@pytest.mark.parametrize(
    "kwargs, given",
    [({}, "neither"), ({"num_cores_per_replica": 8, "computation_shape": [2, 2, 1, 2]}, "both")],
)
def test_exactly_one_of_shape_and_core_count(kwargs, given):
    with pytest.raises(
        ValueError,
        match=rf"^v3-8: got {given} of computation_shape= and num_cores_per_replica=; "
        r"pass exactly one\.",
    ):
        choose(synthetic("v3-8"), **kwargs)


def test_tpu_estimator_three_entry_shape_gets_a_hint():
    with pytest.raises(ValueError, match=r"TPUEstimator's 3-entry form \[x, y, cores\] is "
                       r"\[x, y, 1, cores\] here"):
        choose(synthetic("v3-8"), computation_shape=[2, 2, 2])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"computation_shape": "2,2,1,2"},
         r"computation_shape='2,2,1,2' \(str\); expected 4 ints"),
        ({"num_cores_per_replica": 8.0},
         r"num_cores_per_replica=8\.0 \(float\); expected an int"),
        ({"num_cores_per_replica": 8, "num_replicas": "1"}, r"num_replicas='1' \(str\)"),
        ({"num_cores_per_replica": 8, "computation_stride": [1, 1]},
         r"computation_stride=\[1, 1\] must have 4"),
    ],
)
def test_wrong_types_and_lengths(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        choose(synthetic("v3-8"), **kwargs)


def test_too_many_replicas():
    with pytest.raises(
        ValueError,
        match=r"^v3-32: num_replicas=5, but at most 4 replicas of computation_shape "
        r"\[2, 2, 1, 2\] fit\. Valid values: 1 to 4 \(or None for 4\)\. Fix: pass one "
        r"of these, or fewer cores per replica for more replicas\.$",
    ):
        choose(synthetic("v3-32"), num_cores_per_replica=8, num_replicas=5)


def test_topology_must_be_a_topology():
    with pytest.raises(TypeError, match=r"topology is 'v3-8' \(str\); expected a "
                       r"tf\.tpu\.experimental\.Topology"):
        choose("v3-8", num_cores_per_replica=8)


def test_table_assumes_x_is_the_long_side_and_the_chooser_reads_the_mesh():
    # v3-64 is a "4x8" slice: mesh [4, 8, 1, 2]. The table's 64-core [8, 4, 1, 2] is the
    # transposed block and does not fit; the chooser takes the mesh as it comes.
    topology = synthetic("v3-64")
    with pytest.raises(ValueError, match="does not fit in TPU topology shape"):
        tf.tpu.experimental.DeviceAssignment.build(
            topology, computation_shape=_as_4d(TPU_ESTIMATOR[64]), num_replicas=1
        )
    assert choose(topology, num_cores_per_replica=64).computation_shape == (4, 8, 1, 2)


def test_degraded_slice_with_missing_cores():
    # A v3-8 whose last chip is missing: 6 of 8 cores report in.
    coords = [c for c in synthetic("v3-8").device_coordinates[0].tolist() if c[:2] != [1, 1]]
    degraded = tf.tpu.experimental.Topology(mesh_shape=[2, 2, 1, 2], device_coordinates=[coords])
    choice = choose(degraded, num_cores_per_replica=2)
    assert choice.num_replicas == 3
    assert "2 missing cores" in choice.reason
    da = choice.device_assignment()
    used = [tuple(c) for c in da.core_assignment.reshape(-1, 4)]
    assert len(set(used)) == 6 and set(used) == {tuple(c) for c in coords}
