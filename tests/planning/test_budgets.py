"""Budgets: bytes, sizes, TPU generations and slice names, the reserve, bad values."""
import pytest

from spatial_tf.planning.budgets import RESERVE_FRACTION, parse_budget

GiB = 2**30


@pytest.mark.parametrize("name, per_device", [
    ("v2", 8 * GiB), ("v3", 16 * GiB), ("v4", 32 * GiB), ("v5e", 16 * GiB),
    ("v5p", 95 * GiB), ("v6e", 32 * GiB),
])
def test_generations_give_hbm_per_device_less_the_reserve(name, per_device):
    budget = parse_budget(name)
    assert budget.device_bytes == per_device
    assert budget.usable == int(per_device * (1 - RESERVE_FRACTION))
    assert budget.reserve == RESERVE_FRACTION == 0.10
    assert budget.device is not None


def test_slice_names_and_aliases_read_as_their_generation():
    assert parse_budget("v3-8").device_bytes == 16 * GiB
    assert parse_budget("V3-128").device_bytes == 16 * GiB
    assert parse_budget("v5litepod-16").device_bytes == 16 * GiB
    assert parse_budget("v4-8").device.startswith("chip")
    assert parse_budget("v3").device.startswith("TensorCore")


def test_sizes_binary_and_decimal_units():
    assert parse_budget("16GiB").usable == 16 * GiB
    assert parse_budget("512 MiB").usable == 512 * 2**20
    assert parse_budget("1.5GiB").usable == 3 * GiB // 2
    assert parse_budget("8GB").usable == 8 * 10**9
    assert parse_budget("100").usable == 100
    assert parse_budget(12345).usable == 12345
    assert parse_budget(12345).reserve == 0.0


def test_reserve_overrides():
    assert parse_budget("v3", reserve=0).usable == 16 * GiB
    assert parse_budget("16GiB", reserve=0.25).usable == 12 * GiB
    budget = parse_budget("v3")
    assert parse_budget(budget) is budget


def test_a_tpu_budget_keeps_its_generation_and_slice():
    budget = parse_budget("V5litepod-16")
    assert (budget.generation.name, budget.slice.name, budget.slice.devices) == ("v5e", "v5e-16", 16)
    assert parse_budget("v4").slice is None and parse_budget("v4").generation.name == "v4"
    assert parse_budget("2GiB").generation is None and parse_budget("2GiB").slice is None


@pytest.mark.parametrize("value, message", [
    ("v9", "budget is 'v9'; expected a size or a TPU generation or slice"),
    ("16 parsecs", "budget is '16 parsecs'; expected a size unit among"),
    ("lots", "budget is 'lots'; expected a size or a TPU generation or slice"),
    (0, "budget is 0; expected a positive number of bytes"),
    (-5, "budget is -5; expected a positive number of bytes"),
    ("0GiB", "budget is '0GiB'; expected a positive size"),
    ("v3-x", "budget is 'v3-x'; expected a size or a TPU generation or slice (TPU slice "
             "'v3-x': the part after the dash is 'x')"),
])
def test_unparsable_budgets_name_value_expected_and_fix(value, message):
    with pytest.raises(ValueError) as e:
        parse_budget(value)
    assert message in str(e.value)
    assert "Fix: pass bytes (e.g. 17179869184), a size such as '16GiB'" in str(e.value)
    assert "v2, v3, v4, v5e, v5p, v6e" in str(e.value)


def test_wrong_types_and_reserves():
    with pytest.raises(TypeError, match=r"budget is 16.0; expected bytes \(int\), a size"):
        parse_budget(16.0)
    with pytest.raises(TypeError, match="budget is True"):
        parse_budget(True)
    with pytest.raises(ValueError, match=r"budget reserve is 1; expected a fraction from 0"):
        parse_budget("v3", reserve=1)
    with pytest.raises(ValueError, match=r"budget reserve is -0.1"):
        parse_budget("v3", reserve=-0.1)


def test_str_says_where_the_figure_comes_from():
    assert str(parse_budget("v3")) == ("v3: 16.0 GiB per core (one TensorCore), 14.4 GiB usable "
                                       "after a 10% reserve")
    assert str(parse_budget("v4-8")) == ("v4-8: 32.0 GiB per core (one chip), 28.8 GiB usable "
                                         "after a 10% reserve")
    assert str(parse_budget("v3", reserve=0)) == "v3: 16.0 GiB per core (one TensorCore), no reserve"
    assert str(parse_budget("2GiB")) == "2.0 GiB per core"
    # a size with a reserve of your own says so too
    assert str(parse_budget("2GiB", reserve=0.25)) == ("2GiB: 2.0 GiB per core, 1.5 GiB usable "
                                                       "after a 25% reserve")


def test_limit_is_the_usable_bytes_with_the_reserve_that_made_them():
    assert parse_budget("v3").limit == "14.4 GiB usable after a 10% reserve"
    assert parse_budget("256MiB").limit == "256.0 MiB"
