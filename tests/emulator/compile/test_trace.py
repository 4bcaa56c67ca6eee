"""Tracing a step: argument split and cache keys, captures, writes, output packing."""
import collections

import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.emulator.compile.trace import CallSignature, leaf_paths, trace

Pair = collections.namedtuple("Pair", "image label")


def test_signature_separates_tensors_from_static_values():
    sig = CallSignature((Pair(tf.ones([2, 3]), np.zeros([2], np.int32)), 0.5), {"training": True})
    assert [s.shape.as_list() for s in sig.specs] == [[2, 3], [2]]
    assert sig.paths == ["args[0].image", "args[0].label"]
    args, kwargs = sig.bind(["a", "b"])
    assert args == (Pair("a", "b"), 0.5) and kwargs == {"training": True}


def test_signature_keys():
    key = CallSignature((tf.ones([2, 3]),), {"k": 1}).key
    assert key == CallSignature((tf.zeros([2, 3]),), {"k": 1}).key  # values do not matter
    assert key != CallSignature((tf.ones([2, 4]),), {"k": 1}).key  # shapes do
    assert key != CallSignature((tf.ones([2, 3], tf.float16),), {"k": 1}).key  # dtypes do
    assert key != CallSignature((tf.ones([2, 3]),), {"k": 2}).key  # static values do
    assert key != CallSignature([[tf.ones([2, 3])]], {"k": 1}).key  # nesting does
    unhashable = [1]
    assert CallSignature((unhashable,), None).key == CallSignature((unhashable,), None).key


def test_a_tensor_spec_stands_for_a_tensor_of_its_shape_and_dtype():
    spec = CallSignature(({"x": tf.TensorSpec([2, 3], tf.float16, name="x")}, 1), None)
    tensor = CallSignature(({"x": tf.ones([2, 3], tf.float16)}, 1), None)
    assert spec.key == tensor.key and spec.paths == ["args[0]['x']"]
    assert spec.without_values == ["args[0]['x']"] and tensor.without_values == []
    tensor.require_values("step", "run")  # values: nothing raised
    with pytest.raises(TypeError) as e:
        spec.require_values("step", "run")
    assert str(e.value) == (
        "step: args[0]['x'] is TensorSpec(shape=(2, 3), dtype=tf.float16, name=None), which "
        "has no values; run computes with them. Fix: pass a tensor of that shape and dtype "
        "(a TensorSpec is for lower, compile and report, which only compile the step).")


def test_traced_program_layout():
    v = tf.Variable(tf.ones([3]))
    untouched = tf.Variable(2.0)
    table = tf.constant([1.0, 2.0, 3.0])

    def step(x, scale):
        v.assign(v * scale + x)
        return {"total": tf.reduce_sum(v) * untouched + tf.reduce_sum(table), "none": None}

    traced = trace(step, (tf.ones([3]), 2.0))
    assert traced.arg_specs == (tf.TensorSpec([3], tf.float32),)
    kinds = [type(c).__name__ for c in traced.captures]
    assert sorted(kinds) == ["ResourceVariable", "ResourceVariable", "ndarray"]
    assert traced.written_variables == [v]
    assert {x.ref() for x in traced.variables} == {v.ref(), untouched.ref()}
    assert traced.output_paths() == ["outputs['total']"]
    packed = traced.pack_outputs([tf.constant(1.0)])
    assert packed["none"] is None and float(packed["total"]) == 1.0
    assert traced.parameter_types[0] == ((3,), "float32")


def test_composite_outputs_are_refused():
    with pytest.raises(TypeError, match=r"outputs\['r'\] is a RaggedTensor.*to_tensor"):
        trace(lambda x: {"r": tf.RaggedTensor.from_row_lengths(x, [1, 2])}, (tf.ones([3]),))


def test_resources_other_than_variables_are_refused():
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant([1, 2]), tf.constant([10.0, 20.0])), -1.0
    )
    with pytest.raises(TypeError, match="resource that is not a variable.*lookup table"):
        trace(lambda k: table.lookup(k), (tf.constant([1, 2]),))


def test_leaf_paths_follow_tf_nest_order():
    tree = {"b": [1, Pair(2, 3)], "a": None}
    assert leaf_paths(tree, "outputs") == [
        "outputs['a']", "outputs['b'][0]", "outputs['b'][1].image", "outputs['b'][1].label"
    ]
    assert len(leaf_paths(tree, "x")) == len(tf.nest.flatten(tree))
