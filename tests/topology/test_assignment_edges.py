"""Boundaries of choose(): each case here once let a changed check pass unnoticed."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.topology import choose, synthetic
from spatial_tf.topology.assignment import _why_worse, check_vector
from spatial_tf.topology.shapes import Ranked


def _mesh(x, y, z, c):
    coords = [[[i, j, k, n] for k in range(z) for j in range(y) for i in range(x) for n in range(c)]]
    return tf.tpu.experimental.Topology(mesh_shape=[x, y, z, c], device_coordinates=coords)


@pytest.mark.parametrize("n", [0, -1])
def test_num_replicas_below_one(n):
    with pytest.raises(ValueError, match=rf"^v3-32: num_replicas={n}, but at most 4 replicas "
                       r"of computation_shape \[2, 2, 1, 2\] fit\. Valid values: 1 to 4"):
        choose(synthetic("v3-32"), num_cores_per_replica=8, num_replicas=n)


@pytest.mark.parametrize("n", [1, 4])
def test_num_replicas_one_and_exactly_the_limit(n):
    choice = choose(synthetic("v3-32"), num_cores_per_replica=8, num_replicas=n)
    assert choice.num_replicas == n and choice.max_replicas == 4
    assert choice.device_assignment().num_replicas == n
    assert ("idle" in choice.reason) == (n < 4)


def test_num_cores_per_replica_zero_and_negative():
    for n in (0, -4):
        with pytest.raises(ValueError, match=rf"^v3-8: num_cores_per_replica={n} is not a positive "
                           r"power of two\. Valid values for v3-8: 1, 2, 4, 8\. Fix: pass one of "
                           r"these\.$"):
            choose(synthetic("v3-8"), num_cores_per_replica=n)


def test_one_core_shape():
    choice = choose(synthetic("v3-8"), computation_shape=[1, 1, 1, 1])
    assert choice.computation_shape == (1, 1, 1, 1)
    assert choice.num_cores_per_replica == 1 and choice.num_replicas == 8
    assert choice.alternatives == ()


@pytest.mark.parametrize("bad", [[0, 1, 1, 1], [1, -1, 1, 2], [1, 1, 1, 0]])
def test_shape_entries_below_one(bad):
    with pytest.raises(ValueError, match=rf"^v3-8: computation_shape={bad!s}".replace("[", r"\[")
                       .replace("]", r"\]") + r" must have 4 positive entries"):
        choose(synthetic("v3-8"), computation_shape=bad)


def test_float_shape_entries_are_refused():
    with pytest.raises(TypeError, match=r"computation_shape=\[2\.0, 2, 1, 2\] \(list\); expected 4 ints"):
        choose(synthetic("v3-8"), computation_shape=[2.0, 2, 1, 2])
    with pytest.raises(TypeError, match=r"computation_stride=\[1, True, 1, 1\] \(list\)"):
        choose(synthetic("v3-8"), num_cores_per_replica=2, computation_stride=[1, True, 1, 1])


def test_128_cores_is_the_largest_shape():
    assert choose(synthetic("v3-256"), computation_shape=[8, 8, 1, 2]).num_cores_per_replica == 128
    with pytest.raises(ValueError, match=r"^v3-256: computation_shape=\[8, 16, 1, 2\] has 256 cores "
                       r"per replica; expected a power of two up to 128\. Valid core counts for "
                       r"v3-256: 1, 2, 4, 8, 16, 32, 64, 128\. Fix: give a computation_shape "
                       r"with one of these core counts, or num_cores_per_replica= instead\.$"):
        choose(synthetic("v3-256"), computation_shape=[8, 16, 1, 2])
    assert choose(synthetic("v3-256"), num_cores_per_replica=128).num_cores_per_replica == 128


def test_given_shape_keeps_the_others_as_alternatives_best_first():
    choice = choose(synthetic("v3-8"), computation_shape=[2, 2, 1, 1])
    assert choice.computation_shape == (2, 2, 1, 1)
    assert choice.alternatives == ((1, 2, 1, 2), (2, 1, 1, 2))
    assert choice.num_cores_per_replica == 4
    assert choice.reason.startswith("requested: 4 cores as a 2x2x1 block of chips with 1 of "
                                    "the 2 cores of each chip")
    assert "next best" not in choice.reason


def test_shape_larger_than_the_mesh_names_the_axis():
    with pytest.raises(ValueError, match=r"axis x needs 4 but the slice has 2\."):
        choose(synthetic("v3-8"), computation_shape=[4, 1, 1, 2])


def test_strides_on_a_mesh_that_is_not_a_power_of_two():
    topology = _mesh(6, 1, 1, 1)
    choice = choose(topology, num_cores_per_replica=2, computation_stride=[3, 1, 1, 1])
    assert choice.computation_shape == (2, 1, 1, 1)
    assert choice.num_replicas == choice.max_replicas == 3
    assert ", cores [3, 1, 1, 1] apart;" in choice.reason
    used = {tuple(map(int, c)) for c in choice.device_assignment().core_assignment.reshape(-1, 4)}
    assert len(used) == 6
    with pytest.raises(ValueError, match=r"no block of 2 cores tiles mesh_shape \[6, 1, 1, 1\] with "
                       r"computation_stride \[2, 1, 1, 1\]\. Valid values for .*: 1\. Fix: "
                       r"pass one of these, or another computation_stride\.$"):
        choose(topology, num_cores_per_replica=2, computation_stride=[2, 1, 1, 1])
    with pytest.raises(ValueError, match=r"axis x \(6\) is not a multiple of 4, so 2 of every 6 would "
                       r"sit idle"):
        choose(topology, computation_shape=[2, 1, 1, 1], computation_stride=[2, 1, 1, 1])


@pytest.mark.parametrize(
    "topology, n, text",
    [
        # one device per chip
        (synthetic("v4-8"), 2, "most compact block: 2 cores as a 1x2x1 block of chips with "
         "one device per chip (surface 5, at most 1 hop apart, 1 host per replica); "
         "2 replicas tile the 2x2x1 chip mesh; next best [2, 1, 1, 1] (equally compact; "
         "tie broken towards y)"),
        # all cores of each chip; runner-up splits a chip's cores
        (synthetic("v3-8"), 4, "most compact block: 4 cores as a 1x2x1 block of chips with "
         "all 2 cores of each chip (surface 5, at most 1 hop apart, 1 host per replica); "
         "2 replicas tile the 2x2x1 chip mesh; next best [2, 1, 1, 2] (equally compact; "
         "tie broken towards y)"),
        (synthetic("v3-8"), 2, "next best [1, 2, 1, 1] (splits chips' cores across replicas)"),
        # runner-up has a larger surface
        (synthetic("v4-64"), 8, "as a 2x2x2 block of chips with one device per chip (surface "
         "12, at most 3 hops apart"),
        (synthetic("v4-64"), 8, "(surface 14)"),
        (synthetic("v4-16"), 4, "next best [1, 2, 2, 1] (spans 2 hosts)"),
        (synthetic("v4-32"), 4, "next best [1, 2, 2, 1] (spans 2 hosts)"),
        (_mesh(4, 1, 1, 1), 4, "most compact block: 4 cores as a 4x1x1 block of chips"),
    ],
)
def test_reason_texts(topology, n, text):
    reason = choose(topology, num_cores_per_replica=n).reason
    assert text in reason, reason


def test_choice_is_frozen_and_its_repr_leaves_out_the_topology():
    choice = choose(synthetic("v3-8"), num_cores_per_replica=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.num_replicas = 1
    assert repr(choice).startswith(
        "Choice(computation_shape=(1, 2, 1, 2), computation_stride=(1, 1, 1, 1), "
        "num_replicas=2, max_replicas=2, reason='most compact block: 4 cores"
    )
    assert "synthetic(" not in repr(choice) and "Topology" not in repr(choice)


def test_bad_vector_names_the_mesh_when_known():
    with pytest.raises(ValueError, match=r"^v3-8: computation_shape=\[2, 2\] must have 4 positive "
                       r"entries \[x, y, z, cores_per_chip\], one per axis of mesh_shape "
                       r"\[2, 2, 1, 2\]\. Fix: e\.g\. computation_shape=\[2, 2, 1, 2\]\.$"):
        choose(synthetic("v3-8"), computation_shape=[2, 2])
    with pytest.raises(ValueError, match=r"^auto: computation_shape=\[2, 2\] must have 4 positive "
                       r"entries \[x, y, z, cores_per_chip\], one per axis of the TPU mesh\. "
                       r"Fix: e\.g\. computation_shape=\[2, 2, 1, 2\]\.$"):
        check_vector([2, 2], "computation_shape", "auto")
    assert check_vector(None, "computation_stride", "auto", default=1) == (1, 1, 1, 1)
    assert check_vector(np.array([2, 1, 1, 2]), "computation_shape", "auto") == (2, 1, 1, 2)


def test_strided_shape_larger_than_the_mesh_names_the_footprint():
    # 2 chips 4 apart need 8 along x; v3-32 has 4.
    with pytest.raises(ValueError, match=r"^v3-32: computation_shape=\[2, 1, 1, 1\] does not fit "
                       r"mesh_shape \[4, 4, 1, 2\] \(computation_stride \[4, 1, 1, 1\]\): axis x "
                       r"needs 8 but the slice has 4\."):
        choose(synthetic("v3-32"), computation_shape=[2, 1, 1, 1], computation_stride=[4, 1, 1, 1])
    # 2 chips 2 apart need exactly 4: it fits.
    choice = choose(synthetic("v3-32"), computation_shape=[2, 1, 1, 1],
                    computation_stride=[2, 1, 1, 1])
    assert choice.num_replicas == choice.max_replicas == 16


@pytest.mark.parametrize(
    "best, other, text",
    [
        (Ranked((1, 1, 1, 2), 3, 3, 1), Ranked((1, 2, 1, 1), 5, 4, 1),
         "splits chips' cores across replicas"),
        (Ranked((2, 2, 2, 1), 12, 6, 2), Ranked((2, 4, 1, 1), 14, 7, 2), "surface 14"),
        # Power-of-two blocks never tie on surface with different spans, so choose() cannot
        # reach this branch; the figures are written out: span 7 is 7 - 3 = 4 hops.
        (Ranked((1, 2, 4, 1), 14, 6, 1), Ranked((1, 2, 4, 1), 14, 7, 1), "up to 4 hops"),
        (Ranked((1, 2, 2, 1), 8, 5, 1), Ranked((2, 2, 1, 1), 8, 5, 2), "spans 2 hosts"),
        (Ranked((1, 2, 1, 1), 5, 4, 1), Ranked((2, 1, 1, 1), 5, 4, 1),
         "equally compact; tie broken towards y"),
    ],
)
def test_why_worse_each_branch(best, other, text):
    assert _why_worse(best, other) == text
