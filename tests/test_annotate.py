import logging

import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf._tf_internals import xla_data_pb2
from spatial_tf import annotate, context
from spatial_tf.annotate import annotate_tensor
from spatial_tf.spec import Assign, PartialTile, Replicate, Tile


def shardings_of(fn, *args):
    """Trace fn in a graph; return the OpSharding on each tensor it returns (same nest)."""
    found = []

    def traced(*a):
        out = fn(*a)
        for t in tf.nest.flatten(out):
            if t.op.type != "XlaSharding":
                found.append(None)  # not annotated
                continue
            p = xla_data_pb2.OpSharding()
            p.ParseFromString(t.op.get_attr("_XlaSharding"))
            found.append(p)
        return out

    outputs = tf.function(traced).get_concrete_function(*args).structured_outputs
    return tf.nest.pack_sequence_as(outputs, found)


def tiled(p):
    return list(p.tile_assignment_dimensions), list(p.tile_assignment_devices), p.replicate_on_last_tile_dim


REPLICATED = xla_data_pb2.OpSharding.REPLICATED
MAXIMAL = xla_data_pb2.OpSharding.MAXIMAL


def test_single_image_tensor_from_the_guide():
    image = tf.zeros([8, 64, 64, 3])
    got = shardings_of(lambda x: spatial_tf.split(x, [1, 4, 1, 1]), image)
    assert tiled(got) == ([1, 4, 1, 1], [0, 1, 2, 3], False)


def test_dict_features_and_dict_labels_from_the_guide():
    features = {"image": tf.zeros([8, 64, 64, 3]), "image_mask": tf.zeros([8, 64, 64, 1])}
    labels = {"class_label": tf.zeros([8], tf.int32), "mask": tf.zeros([8, 64, 64, 1])}
    spec = [{"image": [1, 4, 1, 1], "image_mask": [1, 2, 2, 1]}, {"class_label": [1], "mask": None}]
    f, l = shardings_of(lambda f, l: spatial_tf.split((f, l), spec), features, labels)
    assert tiled(f["image"]) == ([1, 4, 1, 1], [0, 1, 2, 3], False)
    assert tiled(f["image_mask"]) == ([1, 2, 2, 1], [0, 1, 2, 3], False)
    assert l["class_label"].type == REPLICATED
    assert l["mask"].type == REPLICATED


def test_dict_features_with_single_label_from_the_guide():
    features = {"image": tf.zeros([8, 64, 64, 3]), "image_mask": tf.zeros([8, 64, 64, 1])}
    spec = [{"image": [1, 4, 1, 1], "image_mask": [1, 2, 2, 1]}, [1]]
    f, l = shardings_of(lambda f, l: spatial_tf.split((f, l), spec), features, tf.zeros([8]))
    assert tiled(f["image_mask"]) == ([1, 2, 2, 1], [0, 1, 2, 3], False)
    assert l.type == REPLICATED


def test_partial_tile_and_assign_protos():
    x = tf.zeros([4, 16, 16, 1])
    got = shardings_of(
        lambda x: spatial_tf.split([x, x], [PartialTile(1, 2, 1, 1), Assign(3)], num_cores_per_replica=8), x
    )
    assert tiled(got[0]) == ([1, 2, 1, 1, 4], list(range(8)), True)
    assert got[1].type == MAXIMAL and list(got[1].tile_assignment_devices) == [3]


def test_hlo_carries_the_sharding_exactly():
    @tf.function(jit_compile=True)
    def step(x):
        x = spatial_tf.split(x, [1, 2, 4, 1])
        return tf.reduce_sum(tf.nn.relu(x))

    hlo = step.experimental_get_compiler_ir(tf.zeros([2, 16, 16, 3]))(stage="hlo")
    line = next(l for l in hlo.splitlines() if 'custom_call_target="Sharding"' in l)
    assert "sharding={devices=[1,2,4,1]0,1,2,3,4,5,6,7}" in line


def test_split_keeps_structure_and_values():
    Batch = __import__("collections").namedtuple("Batch", "a b")
    x = Batch(tf.reshape(tf.range(16.0), [2, 8]), {"k": tf.ones([3])})
    out = spatial_tf.split(x, Batch([1, 2], {"k": None}))
    assert isinstance(out, Batch) and set(out.b) == {"k"}
    np.testing.assert_array_equal(out.a.numpy(), x.a.numpy())


def test_split_converts_arrays_to_tensors():
    out = spatial_tf.split(np.ones([2, 4], np.float32), [1, 2])
    assert tf.is_tensor(out)


def test_bad_spec_raises_the_path_error_before_annotating():
    with pytest.raises(ValueError, match=r"features\['image'\]: axis 1 has size 6"):
        spatial_tf.split(({"image": tf.zeros([1, 6, 8, 1])}, tf.zeros([1])), [{"image": [1, 4, 1, 1]}, None])


def test_cores_inferred_from_the_largest_tile():
    got = shardings_of(
        lambda a, b: spatial_tf.split({"a": a, "b": b}, {"a": [1, 8], "b": None}),
        tf.zeros([2, 16]), tf.zeros([2]),
    )
    assert tiled(got["a"])[0] == [1, 8]
    numpy_dims = shardings_of(lambda a: spatial_tf.split(a, list(np.array([1, 4]))), tf.zeros([2, 16]))
    assert tiled(numpy_dims)[0] == [1, 4]
    with pytest.raises(ValueError, match=r"inputs\['b'\]: partition dims \[2, 1\] have product 2, but num_cores_per_replica is 8 \(inferred from inputs\['a'\] Tile\(1, 8\), the largest split in the spec, as no TPUStrategy, Emulator or num_cores_per_replica= gives it\)\. Expected"):
        spatial_tf.split({"a": tf.zeros([2, 16]), "b": tf.zeros([2, 2])}, {"a": [1, 8], "b": [2, 1]})


def test_numpy_array_dims_without_a_strategy():
    # the one parser reads a NumPy array of dims for the core count as validate does
    got = shardings_of(lambda a: spatial_tf.split(a, np.array([1, 4])), tf.zeros([2, 16]))
    assert tiled(got) == ([1, 4], [0, 1, 2, 3], False)
    out = spatial_tf.split(tf.zeros([2, 16]), np.array([1, 4]))
    assert out.shape == (2, 16)


def test_inferred_core_count_without_any_tile_is_named_too():
    with pytest.raises(ValueError, match=r"^inputs: PartialTile\(1, 2\) splits into 2 pieces, "
                       r"which does not divide num_cores_per_replica=1 \(inferred from a spec "
                       r"without Tile, the largest split"):
        spatial_tf.split(tf.zeros([2, 16]), PartialTile(1, 2))


def test_given_core_count_is_not_called_inferred():
    with pytest.raises(ValueError) as e:
        spatial_tf.split(tf.zeros([2, 16]), [1, 4], num_cores_per_replica=8)
    assert "num_cores_per_replica is 8. Expected" in str(e.value)
    assert "inferred" not in str(e.value)
    with pytest.raises(ValueError, match=r"num_cores_per_replica is 3; expected one of"):
        spatial_tf.split(tf.zeros([2, 16]), [1, 4], num_cores_per_replica=3)


def test_nothing_is_annotated_when_structures_do_not_zip():
    with pytest.raises(ValueError, match=r"inputs: spec keys do not match the inputs: missing 1 key 'b'"):
        spatial_tf.split({"a": tf.zeros([2]), "b": tf.zeros([2])}, {"a": None})


def test_active_layout_sets_the_core_count():
    class Layout:
        num_cores_per_replica = 8

    def fn(x):
        with context.logical_device_scope(Layout()):
            return spatial_tf.split(x, PartialTile(2, 1))

    assert tiled(shardings_of(fn, tf.zeros([4, 4]))) == ([2, 1, 4], list(range(8)), True)


def test_active_layout_refuses_assign_like_spmd_tpu_strategy():
    class Layout:
        num_cores_per_replica = 4

    with context.logical_device_scope(Layout()):
        with pytest.raises(ValueError, match=r"Assign\(1\): spatial_tf.Emulator \(like TPUStrategy in SPMD mode\) does not allow"):
            spatial_tf.split(tf.zeros([8]), Assign(1))


def test_warns_once_when_nothing_partitions(caplog, monkeypatch):
    monkeypatch.setattr(annotate, "_warned_unpartitioned", False)
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        spatial_tf.split(tf.zeros([2, 4]), [1, 2])
        spatial_tf.split(tf.zeros([2, 4]), [1, 2])
    warnings = [r for r in caplog.records if "nothing partitions" in r.getMessage()]
    assert len(warnings) == 1


def test_eager_annotation_is_identity():
    x = tf.random.normal([2, 8])
    np.testing.assert_array_equal(annotate_tensor(x, Tile(1, 2), 2).numpy(), x.numpy())


# ---------------------------------------------------------------- TPUStrategy dispatch


@context.TPUStrategyLike.register
class FakeTPUStrategy:
    """Stands in for TPUStrategy: records the calls split() makes."""

    def __init__(self, cores, spmd=True):
        self.calls = []
        self.extended = type("Extended", (), {})()
        self.extended._tpu_devices = np.empty((1, cores), dtype=object)
        self.extended._use_spmd_for_xla_partitioning = spmd

    def experimental_split_to_logical_devices(self, tensor, partition_dimensions):
        self.calls.append(("split", tuple(partition_dimensions)))
        return tensor

    def experimental_replicate_to_logical_devices(self, tensor):
        self.calls.append(("replicate",))
        return tensor

    def experimental_assign_to_logical_device(self, tensor, logical_device_id):
        self.calls.append(("assign", logical_device_id))
        return tensor


def test_tpu_strategy_methods_are_called_per_tensor():
    s = FakeTPUStrategy(4, spmd=False)
    batch = ({"image": tf.zeros([8, 64, 64, 3]), "mask": tf.zeros([8, 64, 64, 1])}, tf.zeros([8]))
    spatial_tf.split(batch, [{"image": [1, 4, 1, 1], "mask": [1, 2, 2, 1]}, Assign(2)], strategy=s)
    assert s.calls == [("split", (1, 4, 1, 1)), ("split", (1, 2, 2, 1)), ("assign", 2)]


def test_tpu_strategy_core_count_comes_from_the_strategy():
    s = FakeTPUStrategy(8)
    with pytest.raises(ValueError, match=r"have product 4, but num_cores_per_replica is 8"):
        spatial_tf.split(tf.zeros([8, 64, 64, 3]), [1, 4, 1, 1], strategy=s)
    assert s.calls == []


def test_tpu_strategy_spmd_refuses_assign_clearly():
    s = FakeTPUStrategy(4, spmd=True)
    with pytest.raises(ValueError, match=r"Assign\(1\): TPUStrategy does not allow assigning .* experimental_spmd_xla_partitioning=True"):
        spatial_tf.split(tf.zeros([8]), Assign(1), strategy=s)


def test_tpu_strategy_replicate_and_partial_tile():
    s = FakeTPUStrategy(8)
    got = shardings_of(lambda a, b: spatial_tf.split([a, b], [None, PartialTile(2, 1)], strategy=s),
                       tf.zeros([2]), tf.zeros([4, 4]))
    assert s.calls == [("replicate",)]
    assert got[0] is None  # left to the (fake) strategy's method
    assert tiled(got[1]) == ([2, 1, 4], list(range(8)), True)


def test_an_inferred_core_count_must_be_a_valid_one():
    with pytest.raises(ValueError, match=r"^inputs\['a'\] Tile\(1, 3\): splits into 3 pieces, "
                       r"the core count inferred for this spec as no TPUStrategy, Emulator or "
                       r"num_cores_per_replica= gives one\. Expected a product in \[1, 2, 4"):
        spatial_tf.split({"a": tf.zeros([2, 6])}, {"a": [1, 3]})
