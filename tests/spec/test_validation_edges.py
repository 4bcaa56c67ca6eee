"""Edge cases of validate: each assertion here once let a changed check pass unnoticed."""
import collections

import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.spec import (
    VALID_CORES_PER_REPLICA,
    Assign,
    PartialTile,
    Replicate,
    Tile,
    check_num_cores_per_replica,
    validate,
)

Batch = collections.namedtuple("Batch", "image mask")
Other = collections.namedtuple("Other", "image mask")


def spec_of(*shape, dtype=tf.float32):
    return tf.TensorSpec(shape, dtype)


IMAGE = spec_of(8, 64, 64, 3)


@pytest.mark.parametrize("leaf", [Tile(1, 4), PartialTile(1, 2), Tile(1, 4, 1, 1, 1)])
def test_explicit_tile_leaves_have_their_rank_checked(leaf):
    with pytest.raises(
        ValueError,
        match=rf"^inputs: partition dims \[{', '.join(map(str, leaf.dims))}\] have "
        rf"{len(leaf.dims)} entries but the tensor has rank 4 \(shape \(8, 64, 64, 3\)\)\. "
        r"Expected one split count per axis\. Fix: e\.g\. \[1, 1, 1, 1\] with the axes to "
        r"split set > 1\.$",
    ):
        validate(IMAGE, leaf, 4)


def test_explicit_tile_on_unknown_rank():
    with pytest.raises(
        ValueError,
        match=r"^labels: has unknown rank, so partition dims \[1, 2\] cannot be checked\. "
        r"Fix: give the tensor a static rank \(tf\.ensure_shape in the input pipeline\)\.$",
    ):
        validate((IMAGE, tf.TensorSpec(None)), [None, Tile(1, 2)], 2)


def test_unknown_rank_with_a_bad_spec_suggests_rank_4_dims():
    with pytest.raises(TypeError, match=r"tensor of shape <unknown> \(float32\).* Fix: e\.g\. "
                       r"\[1, 1, 1, 1\]\.$"):
        validate(tf.TensorSpec(None), "x", 2)
    with pytest.raises(TypeError, match=r"Fix: e\.g\. \[1, 1\]\.$"):
        validate(spec_of(2, 3), "x", 2)


@pytest.mark.parametrize("inputs", [{}, [], ()])
def test_empty_structures(inputs):
    assert validate(inputs, None, 4) == inputs
    assert validate(inputs, type(inputs)(), 4) == inputs


def test_empty_dims_are_a_rank_0_tensor_spec():
    assert validate(spec_of(), [], 4) == Replicate()
    with pytest.raises(ValueError, match=r"partition dims \[\] have 0 entries but the tensor has rank 1"):
        validate(spec_of(8), [], 4)


@pytest.mark.parametrize("spec", [None, Replicate()])
def test_one_replicate_for_the_whole_pair(spec):
    features = {"image": IMAGE, "mask": spec_of(8, 64, 64, 1)}
    assert validate((features, spec_of(8)), spec, 4) == (
        {"image": Replicate(), "mask": Replicate()},
        Replicate(),
    )


def test_assign_for_the_whole_pair_puts_every_tensor_on_that_core():
    assert validate((IMAGE, [spec_of(8)]), Assign(1), 2) == (Assign(1), [Assign(1)])


def test_a_single_tile_for_the_whole_pair_is_refused():
    with pytest.raises(
        TypeError,
        match=r"^inputs: is a tuple but the spec is Tile\(1, 4, 1, 1\), which describes one "
        r"tensor\. Expected a spec with the same structure\.",
    ):
        validate((IMAGE, spec_of(8)), Tile(1, 4, 1, 1), 4)


def test_namedtuple_spec_of_another_type_is_refused():
    x = Batch(spec_of(2, 8), spec_of(2, 8))
    with pytest.raises(
        TypeError,
        match=r"^inputs: is a Batch but the spec is a Other\. Fix: use the same namedtuple "
        r"type, a dict of its fields, or a list\.$",
    ):
        validate(x, Other([1, 2], None), 2)


def test_long_specs_are_shortened_in_messages():
    spec = [[1, 1]] * 30
    with pytest.raises(ValueError) as info:
        validate([spec_of(2, 2)] * 2, spec, 1)
    text = repr(spec)[:77] + "..."
    assert f"the spec has 30: {text}. Fix:" in str(info.value)


def test_short_specs_are_quoted_whole():
    spec = [None, None, None]
    with pytest.raises(ValueError, match=r"with 2 elements but the spec has 3: \[None, None, None\]\. Fix"):
        validate([spec_of(2), spec_of(2)], spec, 1)


@pytest.mark.parametrize(
    "n, example",
    [
        (1, "[[1, 4, 1, 1]]"),
        (2, "[[1, 4, 1, 1], None]"),
        (3, "[[1, 4, 1, 1], None, None]"),
        (4, "[[1, 4, 1, 1], None, None, ...]"),
        (7, "[[1, 4, 1, 1], None, None, ...]"),
    ],
)
def test_sequence_hint_for_dims_given_to_a_list(n, example):
    with pytest.raises(TypeError) as info:
        validate([spec_of(2)] * n, [1, 2], 2)
    assert str(info.value).endswith(f"Fix: e.g. {example}.")


def test_sequence_hint_for_a_wrong_type():
    with pytest.raises(TypeError) as info:
        validate([spec_of(2)] * 3, 3, 2)
    assert str(info.value).endswith("Fix: e.g. [[1, 4, 1, 1], None, None].")


def test_dict_hint_lists_at_most_three_keys():
    x = {k: spec_of(2) for k in "abcde"}
    with pytest.raises(TypeError) as info:
        validate(x, [None], 2)
    assert str(info.value).endswith("Fix: e.g. {'a': None, 'b': None, 'c': None}.")


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64, 128])
def test_every_power_of_two_up_to_128_is_accepted(n):
    assert check_num_cores_per_replica(n) == n and type(check_num_cores_per_replica(n)) is int
    assert check_num_cores_per_replica(np.int64(n)) == n


def test_valid_cores_per_replica_written_out():
    assert VALID_CORES_PER_REPLICA == (1, 2, 4, 8, 16, 32, 64, 128)


@pytest.mark.parametrize("n", [0, -1, 129, 255, 256])
def test_just_outside_the_limits(n):
    with pytest.raises(ValueError, match=rf"^num_cores_per_replica is {n}; expected one of"
                                         rf".*\(a power of two up to 128, as TPUConfig "
                                         rf"requires\)"):
        check_num_cores_per_replica(n)


def test_the_argument_name_is_used_in_messages():
    with pytest.raises(ValueError, match=r"^cores is 3; .* Fix: pick the nearest"):
        check_num_cores_per_replica(3, name="cores")
    with pytest.raises(TypeError, match=r"^cores is '8' \(str\); .* Fix: e\.g\. cores=8\.$"):
        check_num_cores_per_replica("8", name="cores")


def test_partial_tile_with_all_cores_becomes_a_tile():
    got = validate(spec_of(2, 8), PartialTile(1, 4), 4)
    assert got == Tile(1, 4) and type(got) is Tile
    got = validate(spec_of(2, 8), PartialTile(1, 2), 4)
    assert type(got) is PartialTile and got.dims == (1, 2)


def test_assign_on_the_last_core_is_accepted():
    assert validate(spec_of(2), Assign(3), 4) == Assign(3)


def test_indivisible_axis_suggests_the_neighbouring_multiples():
    with pytest.raises(ValueError, match=r"axis 1 has size 10, which is not divisible by its split "
                       r"count 4 .* \(e\.g\. 8 or 12\), or split it by a divisor of 10\.$"):
        validate(spec_of(2, 10), [1, 4], 4)
