import collections
import copy

import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.spec import Assign, PartialTile, Replicate, Tile, validate

Batch = collections.namedtuple("Batch", "image mask")


def spec_of(*shape, dtype=tf.float32):
    return tf.TensorSpec(shape, dtype)


GUIDE_FEATURES = {"image": spec_of(8, 64, 64, 3), "image_mask": spec_of(8, 64, 64, 1)}
GUIDE_LABELS = {"class_label": spec_of(8, dtype=tf.int32), "mask": spec_of(8, 64, 64, 1)}


# ---------------------------------------------------------------- the guide's examples


def test_single_image_tensor():
    assert validate((spec_of(8, 64, 64, 3), spec_of(8)), [[1, 4, 1, 1], None], 4) == (
        Tile(1, 4, 1, 1),
        Replicate(),
    )


def test_dict_features_and_dict_labels():
    spec = [
        {"image": [1, 4, 1, 1], "image_mask": [1, 2, 2, 1]},
        {"class_label": [1], "mask": None},
    ]
    assert validate((GUIDE_FEATURES, GUIDE_LABELS), spec, 4) == (
        {"image": Tile(1, 4, 1, 1), "image_mask": Tile(1, 2, 2, 1)},
        {"class_label": Replicate(), "mask": Replicate()},
    )


def test_dict_features_with_a_single_label():
    spec = [{"image": [1, 4, 1, 1], "image_mask": [1, 2, 2, 1]}, [1]]
    got = validate((GUIDE_FEATURES, spec_of(8)), spec, 4)
    assert got == ({"image": Tile(1, 4, 1, 1), "image_mask": Tile(1, 2, 2, 1)}, Replicate())


def test_feature_dims_alone_replicates_labels():
    got = validate((GUIDE_FEATURES, GUIDE_LABELS), [{"image": [1, 4, 1, 1], "image_mask": None}], 4)
    assert got[1] == {"class_label": Replicate(), "mask": Replicate()}


def test_tuple_spec_and_leaf_objects_are_accepted():
    got = validate((GUIDE_FEATURES, GUIDE_LABELS),
                   ({"image": Tile(1, 2, 2, 1), "image_mask": None}, Replicate()), 4)
    assert got[0]["image"] == Tile(1, 2, 2, 1)


def test_works_on_tensors_arrays_and_element_spec():
    ds = tf.data.Dataset.from_tensors(
        ({"image": tf.zeros([64, 64, 3]), "image_mask": tf.zeros([64, 64, 1])}, tf.zeros([], tf.int32))
    ).repeat().batch(8, drop_remainder=True)
    spec = [{"image": [1, 4, 1, 1], "image_mask": [1, 2, 2, 1]}, None]
    from_spec = validate(ds.element_spec, spec, 4)
    from_tensors = validate(next(iter(ds)), spec, 4)
    from_arrays = validate(tf.nest.map_structure(lambda t: t.numpy(), next(iter(ds))), spec, 4)
    assert from_spec == from_tensors == from_arrays


def test_namedtuple_inputs_take_namedtuple_dict_or_list_specs():
    x = Batch(spec_of(2, 8, 8, 1), spec_of(2, 8, 8, 1))
    want = Batch(Tile(1, 2, 1, 1), Replicate())
    assert validate(x, Batch([1, 2, 1, 1], None), 2) == want
    assert validate(x, {"image": [1, 2, 1, 1], "mask": None}, 2) == want
    assert validate(x, [[1, 2, 1, 1], None], 2) == want


def test_none_or_replicate_covers_a_whole_substructure():
    got = validate({"a": spec_of(4), "b": [spec_of(2), spec_of(3)]}, None, 8)
    assert got == {"a": Replicate(), "b": [Replicate(), Replicate()]}
    got = validate({"a": spec_of(4), "b": [spec_of(2)]}, {"a": None, "b": Assign(2)}, 4)
    assert got == {"a": Replicate(), "b": [Assign(2)]}


def test_partial_tile_and_normalisation_to_tile():
    x = spec_of(2, 8, 8, 1)
    assert validate(x, PartialTile(1, 2, 1, 1), 8) == PartialTile(1, 2, 1, 1)
    assert validate(x, PartialTile(1, 2, 4, 1), 8) == Tile(1, 2, 4, 1)


def test_product_one_dims_replicate_under_spmd():
    assert validate(spec_of(2, 8, 8, 1), [1, 1, 1, 1], 8) == Replicate()
    assert validate(spec_of(), [], 8) == Replicate()


def test_one_core_accepts_everything_unsplit():
    assert validate(spec_of(3, 5), [1, 1], 1) == Replicate()
    assert validate(spec_of(3, 5), Tile(1, 1), 1) == Tile(1, 1)


# ---------------------------------------------------------------- every rule, its message


def test_missing_and_extra_dict_keys_are_named():
    spec = [{"image": [1, 4, 1, 1], "imagemask": None}, None]
    with pytest.raises(
        ValueError,
        match=r"features: spec keys do not match the inputs: missing 1 key 'image_mask'; "
        r"1 unknown key 'imagemask'\. Expected exactly the keys \['image', 'image_mask'\]",
    ):
        validate((GUIDE_FEATURES, GUIDE_LABELS), spec, 4)


def test_nested_missing_key_names_the_full_path():
    x = {"outer": {"a": spec_of(4), "b": spec_of(4)}}
    with pytest.raises(ValueError, match=r"inputs\['outer'\]: spec keys .* missing 1 key 'b'"):
        validate(x, {"outer": {"a": None}}, 2)


def test_sequence_length_mismatch():
    with pytest.raises(
        ValueError, match=r"labels: is a list with 3 elements but the spec has 2: \[None, None\]"
    ):
        validate((spec_of(2), [spec_of(2)] * 3), [None, [None, None]], 2)


def test_top_level_pair_with_wrong_spec_length():
    with pytest.raises(ValueError, match=r"inputs: \(features, labels\) has 2 elements but the spec has 3"):
        validate((spec_of(2), spec_of(2)), [None, None, None], 2)


def test_dims_given_for_a_structure():
    with pytest.raises(
        TypeError, match=r"features: is a dict with keys \['image', 'image_mask'\] but the spec is "
        r"\[1, 4, 1, 1\] \(list\)\. Expected a dict with the same keys\. "
        r"Fix: e\.g\. \{'image': None, 'image_mask': None\}"
    ):
        validate((GUIDE_FEATURES, GUIDE_LABELS), [[1, 4, 1, 1], None], 4)
    with pytest.raises(
        TypeError, match=r"labels: is a list but the spec is \[1, 4\], the partition dims of a single "
        r"tensor\. Expected one spec per element\. Fix: e\.g\. \[\[1, 4, 1, 1\], None\]"
    ):
        validate((spec_of(2), [spec_of(2), spec_of(2)]), [None, [1, 4]], 4)


def test_leaf_given_for_a_structure():
    with pytest.raises(TypeError, match=r"features: is a dict .* but the spec is Tile\(1, 4, 1, 1\)"):
        validate((GUIDE_FEATURES, GUIDE_LABELS), [Tile(1, 4, 1, 1), None], 4)


def test_wrong_container_type():
    with pytest.raises(TypeError, match=r"features: is a dict .* but the spec is \[None, None\] \(list\)"):
        validate((GUIDE_FEATURES, GUIDE_LABELS), [[None, None], None], 4)
    with pytest.raises(TypeError, match=r"inputs: is a list but the spec is 'abc' \(str\)"):
        validate([spec_of(2)], "abc", 2)


def test_rank_mismatch():
    with pytest.raises(
        ValueError,
        match=r"features\['image_mask'\]: partition dims \[1, 4, 1\] have 3 entries but the tensor "
        r"has rank 4 \(shape \(8, 64, 64, 1\)\)\. Expected one split count per axis\. Fix: e\.g\. \[1, 1, 1, 1\]",
    ):
        validate((GUIDE_FEATURES, GUIDE_LABELS), [{"image": [1, 4, 1, 1], "image_mask": [1, 4, 1]}, None], 4)


def test_unknown_rank():
    with pytest.raises(ValueError, match=r"inputs: has unknown rank"):
        validate(tf.TensorSpec(None), [1, 2], 2)


@pytest.mark.parametrize(
    "dims, exc, message",
    [
        ([1, 0, 4, 1], ValueError, r"features\['image'\]: partition dims \[1, 0, 4, 1\]: Tile: split count for axis 1 is 0"),
        ([1, -4, 1, 1], ValueError, r"axis 1 is -4; expected a positive int"),
        ([1, 2.5, 1, 1], TypeError, r"features\['image'\]: partition dims \[1, 2.5, 1, 1\]: .*axis 1 is 2.5 \(float\)"),
        ([1, 4.0, 1, 1], TypeError, r"axis 1 is 4.0 \(float\)"),
    ],
)
def test_non_positive_or_non_integer_dims(dims, exc, message):
    with pytest.raises(exc, match=message):
        validate((GUIDE_FEATURES, GUIDE_LABELS), [{"image": dims, "image_mask": None}, None], 4)


def test_product_not_matching_cores_suggests_partial_tile():
    with pytest.raises(
        ValueError,
        match=r"features\['image'\]: partition dims \[1, 2, 1, 1\] have product 2, but "
        r"num_cores_per_replica is 8\. Expected a product of 1 \(replicate\) or 8 .* "
        r"Fix: use PartialTile\(1, 2, 1, 1\)",
    ):
        validate((GUIDE_FEATURES, GUIDE_LABELS), [{"image": [1, 2, 1, 1], "image_mask": None}, None], 8)


def test_product_not_dividing_cores():
    with pytest.raises(ValueError, match=r"have product 3, but num_cores_per_replica is 4.*split counts whose product is 4"):
        validate(spec_of(1, 6, 6, 1), [1, 3, 1, 1], 4)


def test_explicit_tile_of_product_one_suggests_replicate():
    with pytest.raises(ValueError, match=r"have product 1, but num_cores_per_replica is 4.*Fix: use Replicate\(\)"):
        validate(spec_of(3, 5), Tile(1, 1), 4)


def test_partial_tile_not_dividing_cores():
    with pytest.raises(ValueError, match=r"inputs: PartialTile\(3, 1\) splits into 3 pieces, which does not divide num_cores_per_replica=8"):
        validate(spec_of(6, 5), PartialTile(3, 1), 8)


def test_axis_not_divisible():
    with pytest.raises(
        ValueError,
        match=r"features\['image'\]: axis 1 has size 66, which is not divisible by its split count 4 "
        r"\(shape \(8, 66, 64, 3\), dims \[1, 4, 1, 1\]\)\. Fix: pad or crop axis 1 to a multiple of 4 \(e\.g\. 64 or 68\)",
    ):
        validate(({"image": spec_of(8, 66, 64, 3)}, spec_of(8)), [{"image": [1, 4, 1, 1]}, None], 4)


def test_unknown_batch_size_on_split_batch_axis_names_drop_remainder():
    with pytest.raises(ValueError) as e:
        validate(({"image": spec_of(None, 64, 64, 3)}, spec_of(None)), [{"image": [2, 2, 1, 1]}, None], 4)
    assert str(e.value) == (
        "features['image']: axis 0 (the batch axis) is split 2 ways but its size is unknown "
        "(shape (None, 64, 64, 3)). Expected a static batch size divisible by 2. Fix: batch "
        "with dataset.batch(n, drop_remainder=True), n a multiple of 2.")


def test_unknown_size_on_split_spatial_axis_names_a_fixed_size_not_drop_remainder():
    # drop_remainder fixes the batch axis only: a spatial axis needs its own fixed size
    with pytest.raises(ValueError) as e:
        validate(({"image": spec_of(8, None, 64, 3)}, spec_of(8)), [{"image": [1, 4, 1, 1]}, None], 4)
    assert str(e.value) == (
        "features['image']: axis 1 is split 4 ways but its size is unknown (shape "
        "(8, None, 64, 3)). Expected a static size divisible by 4. Fix: give axis 1 a fixed "
        "size in the input pipeline: a fixed-size crop or resize "
        "(tf.image.resize_with_crop_or_pad, tf.image.resize), or "
        "tf.ensure_shape(x, [8, SIZE, 64, 3]) with SIZE a multiple of 4 when every element "
        "has that size.")
    assert "drop_remainder" not in str(e.value)


def test_unknown_size_on_unsplit_axis_is_fine():
    assert validate(spec_of(None, 64, 64, 3), [1, 4, 1, 1], 4) == Tile(1, 4, 1, 1)


@pytest.mark.parametrize("n", [0, 3, 6, 12, 256, -2])
def test_num_cores_per_replica_values(n):
    with pytest.raises(
        ValueError, match=rf"num_cores_per_replica is {n}; expected one of \[1, 2, 4, 8, 16, 32, 64, 128\]"
    ):
        validate(spec_of(2), None, n)


@pytest.mark.parametrize("n", [8.0, "8", True, None])
def test_num_cores_per_replica_types(n):
    with pytest.raises(TypeError, match=r"num_cores_per_replica is .*; expected an int"):
        validate(spec_of(2), None, n)


def test_assign_core_out_of_range():
    with pytest.raises(
        ValueError, match=r"labels: Assign\(4\) names logical core 4, but a replica has 4 cores \(0\.\.3\)"
    ):
        validate((spec_of(2), spec_of(2)), [None, Assign(4)], 4)


def test_spec_of_the_wrong_type_for_a_tensor():
    with pytest.raises(
        TypeError,
        match=r"labels: spec is 4 \(int\), but labels is a tensor of shape \(8,\) \(float32\)\. "
        r"Expected a list of ints .* Fix: e\.g\. \[1\]",
    ):
        validate((spec_of(2), spec_of(8)), [None, 4], 4)
    with pytest.raises(TypeError, match=r"spec is \{'a': None\} \(dict\), but inputs is a tensor"):
        validate(spec_of(2), {"a": None}, 2)


def test_input_that_is_not_a_tensor():
    with pytest.raises(TypeError, match=r"inputs\['x'\]: is 'hello' \(str\); expected a tensor"):
        validate({"x": "hello"}, None, 2)


def test_ragged_and_sparse_inputs_are_refused():
    rt = tf.ragged.constant([[1, 2], [3]])
    with pytest.raises(TypeError, match=r"inputs\['r'\]: is a RaggedTensor; only dense tensors"):
        validate({"r": rt}, None, 2)
    with pytest.raises(TypeError, match=r"is a SparseTensorSpec"):
        validate(tf.SparseTensorSpec([2, 2], tf.float32), None, 2)


def test_nothing_is_mutated_on_failure():
    spec = [{"image": [1, 4, 1, 1], "image_mask": [1, 3, 1, 1]}, {"class_label": [1], "mask": None}]
    inputs = (dict(GUIDE_FEATURES), dict(GUIDE_LABELS))
    before = (copy.deepcopy(spec), {k: v for k, v in inputs[0].items()})
    with pytest.raises(ValueError):
        validate(inputs, spec, 4)
    assert spec == before[0]
    assert inputs[0] == before[1]


def test_nothing_is_mutated_on_success():
    spec = [{"image": [1, 4, 1, 1], "image_mask": None}]
    kept = copy.deepcopy(spec)
    validate((GUIDE_FEATURES, GUIDE_LABELS), spec, 4)
    assert spec == kept


def test_numpy_dims_are_accepted():
    assert validate(spec_of(4, 4), np.array([1, 2]), 2) == Tile(1, 2)


def test_inputs_first_is_the_order_and_spec_first_is_refused():
    import warnings

    inputs = {"image": spec_of(2, 8, 8, 3), "label": spec_of(2)}
    spec = {"image": [1, 2, 2, 1], "label": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the documented order warns about nothing
        new = validate(inputs, spec, 4)
    assert new == {"image": Tile(1, 2, 2, 1), "label": Replicate()}
    with pytest.raises(TypeError, match=r"spatial_tf\.validate\(spec, inputs, \.\.\.\): the first "
                       r"argument is a spec .* the order is validate\(inputs, spec, \.\.\.\), as "
                       r"split\(inputs, spec\)\. Fix: swap the first two arguments\."):
        validate(spec, inputs, 4)
    # NumPy inputs against a spec of ints and None: still told apart
    x = np.zeros([2, 8], np.float32)
    assert validate(x, [1, 4], 4) == Tile(1, 4)
    with pytest.raises(TypeError, match=r"swap the first two arguments"):
        validate([1, 4], x, 4)
