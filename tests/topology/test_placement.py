import collections

import numpy as np
import pytest
import tensorflow as tf

from spatial_tf import Assign, PartialTile, Replicate, Tile
from spatial_tf.topology import choose, device_assignment, synthetic
from spatial_tf.topology.placement import as_device_assignment, describe, tile_of_core


def _rows(table):
    lines = table.splitlines()
    return lines[0], [line.split() for line in lines[3:]]


def test_table_lists_every_replica_and_core_with_its_physical_place():
    da = device_assignment(synthetic("v3-32"), num_cores_per_replica=8)
    title, rows = _rows(describe(da))
    assert title == (
        "4 replicas x 8 logical cores on v3-32 (mesh_shape [4, 4, 1, 2]), 4 hosts"
    )
    assert len(rows) == 32
    for row in rows:
        replica, core, task, x, y, z, chip_core, ordinal = map(int, row)
        assert (x, y, z, chip_core) == tuple(int(c) for c in da.coordinates(replica, core))
        assert task == synthetic("v3-32").task_ordinal_at_coordinates((x, y, z, chip_core))
        assert ordinal == da.tpu_ordinal(replica, core)
    assert len({tuple(r[3:7]) for r in rows}) == 32


def test_tiles_of_a_spec_cover_each_tensor_exactly_once_per_replica():
    da = device_assignment(synthetic("v3-8"), num_cores_per_replica=8)
    spec = {"image": [1, 2, 4, 1], "label": None}
    inputs = {"image": tf.TensorSpec([2, 64, 128, 3]), "label": tf.TensorSpec([2])}
    table = describe(da, inputs, spec)
    assert table.splitlines()[1].split()[-2:] == ["inputs['image']", "inputs['label']"]
    lines = table.splitlines()[3:]
    image_col = table.splitlines()[1].index("inputs['image']")
    label_col = table.splitlines()[1].index("inputs['label']")
    pieces = [line[image_col:label_col].strip() for line in lines]
    assert collections.Counter(pieces) == collections.Counter(
        f"[0:2, {h * 32}:{(h + 1) * 32}, {w * 32}:{(w + 1) * 32}, 0:3]"
        for h in range(2) for w in range(4)
    )
    assert all(line[label_col:].strip() == "whole (replicated)" for line in lines)


def test_tile_of_each_core_matches_the_xla_tile_assignment():
    leaf = Tile(1, 2, 2, 1)
    assignment = leaf.tile_assignment(4)
    for core in range(4):
        (_, h, w, _), = np.argwhere(assignment == core)
        assert tile_of_core(leaf, [4, 8, 8, 3], core, 4) == (
            f"[0:4, {h * 4}:{h * 4 + 4}, {w * 4}:{w * 4 + 4}, 0:3]"
        )


def test_partial_tile_unknown_sizes_assign_and_replicate():
    assert tile_of_core(PartialTile(1, 2), [4, 10], 3, 4) == "[0:4, 5:10] (shared)"
    assert tile_of_core(Tile(2, 1), [None, 10], 1, 2) == "tile (1, 0)"
    assert tile_of_core(Replicate(), [4], 0, 2) == "whole (replicated)"


def test_spec_without_inputs_is_refused():
    da = device_assignment(synthetic("v3-8"), num_cores_per_replica=8)
    with pytest.raises(ValueError, match=r"describe: got spec without inputs\. Pass both"):
        describe(da, {"image": [1, 2, 4, 1]})


def test_spec_errors_name_the_tensor():
    da = device_assignment(synthetic("v3-8"), num_cores_per_replica=8)
    with pytest.raises(ValueError, match=r"inputs\['image'\]: partition dims \[1, 2, 2, 1\] "
                       r"have product 4, but num_cores_per_replica is 8"):
        describe(da, {"image": tf.TensorSpec([1, 8, 8, 3])}, {"image": [1, 2, 2, 1]})


def test_describe_needs_a_device_assignment():
    with pytest.raises(TypeError, match=r"describe: expected a tf\.tpu\.experimental"
                       r"\.DeviceAssignment or a TPUStrategy"):
        describe(synthetic("v3-8"))


@pytest.mark.emulator
def test_describe_an_emulator_maps_replica_and_core_to_its_virtual_device():
    from spatial_tf.emulator import Emulator

    emulator = Emulator(num_cores_per_replica=4, num_replicas=2)
    inputs = {"image": tf.TensorSpec([2, 8, 8, 3])}
    table = describe(emulator, inputs, {"image": [1, 2, 2, 1]})
    lines = table.splitlines()
    assert lines[0] == "2 replicas x 4 logical cores on the CPU emulator (8 virtual CPU devices)"
    assert lines[1].split() == ["replica", "host", "core", "virtual", "device", "inputs['image']"]
    rows = [line.split(None, 4) for line in lines[3:]]
    assert [(int(r), int(h), int(c), d) for r, h, c, d, _ in rows] == [
        (r, 0, c, f"CPU:{emulator.devices[4 * r + c].id}") for r in range(2) for c in range(4)]
    assert [piece for *_, piece in rows[:4]] == [
        "[0:2, 0:4, 0:4, 0:3]", "[0:2, 0:4, 4:8, 0:3]", "[0:2, 4:8, 0:4, 0:3]",
        "[0:2, 4:8, 4:8, 0:3]"]


@pytest.mark.emulator
def test_describe_an_emulator_with_hosts_shows_which_host_feeds_each_replica():
    from spatial_tf.emulator import Emulator

    lines = describe(Emulator(num_cores_per_replica=1, num_replicas=4, num_hosts=2)).splitlines()
    assert lines[0] == ("4 replicas x 1 logical core on the CPU emulator (4 virtual CPU "
                        "devices, 2 hosts with 2 replicas each)")
    assert [tuple(int(x) for x in line.split()[:3]) for line in lines[3:]] == [
        (0, 0, 0), (1, 0, 0), (2, 1, 0), (3, 1, 0)]


@pytest.mark.emulator
def test_describe_an_emulator_of_a_named_slice_shows_the_task_of_every_core():
    from spatial_tf.emulator import Emulator

    # v3-32, 8 cores per replica: TensorFlow's ring visits the 4 hosts as tasks 0, 1, 3, 2
    lines = describe(Emulator(num_cores_per_replica=8, topology="v3-32")).splitlines()
    assert lines[:2] == [
        "4 replicas x 8 logical cores on the CPU emulator (32 virtual CPU devices, 4 "
        "hosts with 1 replica each) as on v3-32",
        "host: the input pipeline feeding the replica, run by task 0, 1, 3, 2 for host 0 to "
        "3; task: the TPU host of the core"]
    assert lines[2].split() == ["replica", "host", "core", "task", "virtual", "device"]
    rows = [tuple(int(x) for x in line.split()[:4]) for line in lines[4:]]
    assert rows == [(r, r, c, (0, 1, 3, 2)[r]) for r in range(4) for c in range(8)]


def test_spec_first_order_is_refused():
    da = device_assignment(synthetic("v3-8"), num_cores_per_replica=8)
    spec = {"image": [1, 2, 4, 1]}
    inputs = {"image": tf.TensorSpec([2, 64, 128, 3])}
    with pytest.raises(TypeError, match=r"spatial_tf\.describe\(spec, inputs, \.\.\.\): the first "
                       r"argument is a spec \(\{'image': \[1, 2, 4, 1\]\}\) and the second holds "
                       r"the inputs; the order is describe\(inputs, spec, \.\.\.\)"):
        describe(da, spec, inputs)
    assert "[0:2, 0:32, 0:32, 0:3]" in describe(da, inputs, spec)


def test_assign_leaves_put_the_whole_tensor_on_one_core():
    assert [tile_of_core(Assign(1), [4, 6], k, 4) for k in range(4)] == ["-", "whole", "-", "-"]
    da = device_assignment(synthetic("v3-8"), num_cores_per_replica=2)
    table = describe(da, {"image": tf.TensorSpec([2, 8]), "label": tf.TensorSpec([2])},
                     {"image": [1, 2], "label": Assign(1)})
    _, rows = _rows(table)
    assert [row[-1] for row in rows[:2]] == ["-", "whole"]


def test_inputs_without_a_spec_are_refused():
    da = device_assignment(synthetic("v3-8"), num_cores_per_replica=2)
    with pytest.raises(ValueError, match=r"^describe: got inputs without spec\. Pass both"):
        describe(da, {"image": tf.TensorSpec([2, 8])})


def test_a_choice_is_not_a_device_assignment():
    # choose() returns a Choice: it has num_replicas and num_cores_per_replica, no devices.
    choice = choose(synthetic("v3-8"), num_cores_per_replica=2)
    with pytest.raises(TypeError, match=r"^describe: expected a tf\.tpu\.experimental\."
                       r"DeviceAssignment or a TPUStrategy .*; got Choice\("):
        describe(choice)


def test_a_tpu_strategy_is_described_by_its_device_assignment():
    from test_strategy import FakeResolver  # a TPU's devices, reported for a synthetic slice

    topology = synthetic("v3-8")
    da = device_assignment(topology, num_cores_per_replica=4)
    strategy = tf.distribute.TPUStrategy(
        FakeResolver(topology), experimental_device_assignment=da,
        experimental_spmd_xla_partitioning=True,
    )
    assert as_device_assignment(strategy) is da
    assert describe(strategy) == describe(da)
