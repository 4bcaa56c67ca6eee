"""validate(inputs, spec, n): the spec-first order of 0.1 is refused, naming the swap;
the inferred core count; message truncation at its exact limit."""
import re
import warnings

import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.spec import Replicate, Tile, infer_num_cores, validate
from spatial_tf.spec.validation import looks_like_spec


def test_spec_first_is_refused_naming_the_swap():
    x = tf.zeros([2, 8])
    with pytest.raises(TypeError) as e:
        validate([1, 4], x, 4)  # the order of 0.1
    assert str(e.value) == (
        "spatial_tf.validate(spec, inputs, ...): the first argument is a spec ([1, 4]) and "
        "the second holds the inputs; the order is validate(inputs, spec, ...), as "
        "split(inputs, spec). Fix: swap the first two arguments.")
    assert validate(x, [1, 4], 4) == Tile(1, 4)


def test_inputs_first_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert validate({"a": tf.zeros([4])}, {"a": [2]}, 2) == {"a": Tile(2)}
        assert validate(np.zeros([4, 2]), np.array([2, 1]), 2) == Tile(2, 1)


HOLDS = "holds the inputs"


@pytest.mark.parametrize("spec, inputs, shown, second", [
    ([2.0, 1], tf.zeros([4, 2]), "[2.0, 1]", HOLDS),  # a tensor
    ([2.0, 1], tf.Variable(tf.zeros([4, 2])), "[2.0, 1]", HOLDS),  # a variable
    ([2.0, 1], tf.TensorSpec([4, 2]), "[2.0, 1]", HOLDS),  # a type spec
    ([2.0, 1], np.zeros([4, 2]), "[2.0, 1]", HOLDS),  # an array that is no spec
    # one tensor among other inputs is enough
    ({"a": [2.0], "b": None}, {"a": tf.zeros([4]), "b": 3}, "{'a': [2.0], 'b': None}", HOLDS),
    # neither holds tensors, but only the first looks like a spec
    ([1, 4], [[0.5, 1.5]], "[1, 4]", "is no spec"),
])
def test_spec_first_is_recognised_even_with_a_bad_spec(spec, inputs, shown, second):
    # The inputs are recognised by their tensors even though the spec is not a valid one,
    # so the error is about the order, not about the spec's float.
    with pytest.raises(TypeError, match=r"^spatial_tf\.validate\(spec, inputs, \.\.\.\): the first "
                       rf"argument is a spec \({re.escape(shown)}\) and the second {second}; "
                       r"the order is validate\(inputs, spec, \.\.\.\)"):
        validate(spec, inputs, 2)


def test_inputs_without_tensors_in_the_documented_order_are_not_refused():
    # a list of floats is inputs, not a spec: no order error
    assert validate([0.5, 1.5], [None, None], 2) == [Replicate(), Replicate()]
    assert validate(3.0, None, 2) == Replicate()


@pytest.mark.parametrize("tree, expected", [
    (None, False), ([1, 4], True), ({"a": None, "b": Replicate()}, True),
    (np.array([1, 4]), True), (np.array([1.0, 4.0]), False), (np.zeros([2, 2], int), False),
    ([True, 4], False), (["x"], False), ([], True), ((Tile(2), 3), True),
])
def test_what_looks_like_a_spec(tree, expected):
    assert looks_like_spec(tree) is expected


def test_inferred_core_count_and_where_it_comes_from():
    assert infer_num_cores({"a": Replicate(), "b": Tile(1, 1)}) == (1, None)
    assert infer_num_cores(Replicate()) == (1, None)
    # the first of two equal splits is named, the larger one wins
    assert infer_num_cores({"a": Tile(1, 2), "b": Tile(2, 1)}) == (2, "inputs['a'] Tile(1, 2)")
    assert infer_num_cores({"a": Tile(1, 2), "b": Tile(2, 4)}) == (8, "inputs['b'] Tile(2, 4)")


def _spec_of_length(length):
    """A 3-element spec whose repr is exactly ``length`` characters."""
    for name_length in range(1, 80):
        spec = [{"k" * name_length: None}, None, None]
        if len(repr(spec)) == length:
            return spec
    raise AssertionError(length)


def test_a_spec_is_quoted_whole_up_to_80_characters():
    inputs = [tf.zeros([2]), tf.zeros([2])]  # 2 elements: a 3-element spec is refused
    for length in (79, 80):
        spec = _spec_of_length(length)
        with pytest.raises(ValueError, match=r"the spec has 3: ") as e:
            validate(inputs, spec, 2)
        assert str(e.value).endswith(f"has 3: {spec!r}. Fix: give exactly one spec per element.")
    spec = _spec_of_length(81)
    with pytest.raises(ValueError) as e:
        validate(inputs, spec, 2)
    assert repr(spec) not in str(e.value)
    assert f"has 3: {repr(spec)[:77]}.... Fix:" in str(e.value)
