"""One record per TPU generation, read by budgets, slices and compile targets alike."""
import pytest

from spatial_tf.planning.budgets import HBM_PER_DEVICE, parse_budget
from spatial_tf.topology.slices import SLICES
from spatial_tf.tpu_generations import GENERATIONS, generation, names, parse

GiB = 2**30

# Cloud TPU's documented figures (system-architecture pages), written out here rather than
# read from the module they check
DOCUMENTED = {"v2": (2, 8 * GiB), "v3": (2, 16 * GiB), "v4": (1, 32 * GiB),
              "v5e": (1, 16 * GiB), "v5p": (1, 95 * GiB), "v6e": (1, 32 * GiB),
              "tpu7x": (2, 96 * GiB)}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_each_generation_has_its_documented_devices_and_hbm(name):
    record = generation(name)
    assert (record.devices_per_chip, record.hbm_per_device) == DOCUMENTED[name]
    assert HBM_PER_DEVICE[name] == (record.hbm_per_device, record.device)
    assert parse_budget(name).device_bytes == record.hbm_per_device
    assert record.source.startswith("cloud.google.com/tpu/docs/")


def test_every_generation_is_documented_here_and_named_in_messages():
    assert set(GENERATIONS) == set(DOCUMENTED)
    assert names() == "v2, v3, v4, v5e, v5p, v6e, tpu7x"


def test_tensorflow_runtimes_as_cloud_tpu_documents_them():
    assert generation("tpu7x").tensorflow is None
    assert generation("v5e").tensorflow == "2.18"


@pytest.mark.parametrize("name, expected", [
    ("v5litepod", "v5e"), ("V5LITE", "v5e"), ("trillium", "v6e"), ("ironwood", "tpu7x"),
    ("v3-8", "v3"), ("v5litepod-16", "v5e"), (" v4 ", "v4"),
])
def test_aliases_and_slice_names_fold_to_the_generation(name, expected):
    assert generation(name).name == expected


@pytest.mark.parametrize("bad", ["v9", "tpu", "v3x", ""])
def test_unknown_generations_are_refused_with_the_known_ones(bad):
    with pytest.raises(ValueError, match=f"unknown TPU generation {bad!r}; expected one of "
                                         f"v2, v3, v4, v5e, v5p, v6e, tpu7x"):
        generation(bad)


def test_every_slice_takes_its_devices_per_chip_from_its_generation():
    assert SLICES  # a loop over nothing must not pass
    for name, shape in SLICES.items():
        assert shape.cores_per_chip == DOCUMENTED[generation(name).name][0], name


@pytest.mark.parametrize("name, cores, topology", [
    ("v3", 1, "v3:2x2"), ("v3", 8, "v3:2x2"), ("v3", 16, "v3:4x4"), ("v3", 128, "v3:8x8"),
    ("v4", 8, "v4:2x2x2"), ("v4", 16, "v4:2x2x4"), ("v5e", 4, "v5e:2x2"), ("v5e", 5, "v5e:2x4"),
    ("v5p", 128, "v5p:4x4x8"), ("v6e", 64, "v6e:8x8"), ("tpu7x", 32, "tpu7x:2x2x4"),
])
def test_the_smallest_compile_only_topology_that_holds_the_cores(name, cores, topology):
    assert generation(name).topology_for(cores) == topology


# Cloud TPU's published peak bf16 FLOP/s per chip, MXUs per TensorCore and HBM bandwidth,
# and the scaling book's one-way ICI bandwidth per link and links per chip, written out
# here: (TensorCores per chip, MXUs per core, peak, HBM bytes/s, ICI link bytes/s, links)
PUBLISHED_TIMING = {
    "v3": (2, 2, 123e12, 900e9, 1e11, 4),
    "v4": (2, 4, 275e12, 1200e9, 4.5e10, 6),
    "v5e": (1, 4, 197e12, 819e9, 4.5e10, 4),
    "v5p": (2, 4, 459e12, 2765e9, 9e10, 6),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_TIMING))
def test_timing_figures_are_the_published_ones_and_the_clock_follows(name):
    cores, mxus, peak, hbm, link, links = PUBLISHED_TIMING[name]
    t = generation(name).timing
    assert (t.tensorcores_per_chip, t.mxus_per_core, t.peak_bf16_per_chip,
            t.hbm_bandwidth_per_chip, t.ici_link_bandwidth, t.ici_links_per_chip) == \
        (cores, mxus, peak, hbm, link, links)
    # a 128x128 MXU does 128 * 128 multiply-adds (2 flops each) per cycle
    assert t.clock_hz == pytest.approx(peak / (cores * mxus * 128 * 128 * 2))
    assert 0.9e9 < t.clock_hz < 1.8e9
    assert t.source.startswith(f"cloud.google.com/tpu/docs/{name}") and "scaling-book" in t.source


@pytest.mark.parametrize("name", ["v2", "v6e", "tpu7x"])
def test_generations_without_published_timing_say_why(name):
    record = generation(name)
    assert record.timing is None and record.timing_missing
    assert set(PUBLISHED_TIMING) | {"v2", "v6e", "tpu7x"} == set(GENERATIONS)


# Cloud TPU's accelerator types: (name, canonical slice, TensorFlow devices). v4/v5p
# suffixes count TensorCores, two per megacore chip (one device); v5e/v6e count chips.
SLICE_NAMES = [
    ("v3-8", "v3-8", 8), ("V3-32", "v3-32", 32), ("v4-8", "v4-8", 4), ("v4-32", "v4-32", 16),
    ("v5p-8", "v5p-8", 4), ("v5litepod-8", "v5e-8", 8), ("v5e-16", "v5e-16", 16),
    ("v6e-4", "v6e-4", 4), ("trillium-8", "v6e-8", 8),
]


@pytest.mark.parametrize("name, canonical, devices", SLICE_NAMES)
def test_a_slice_name_is_its_generation_and_its_devices(name, canonical, devices):
    record, piece = parse(name)
    assert piece.generation is record and piece.name == canonical
    assert piece.devices == devices
    assert generation(name) is record


@pytest.mark.parametrize("name, canonical", [("v3", "v3"), (" V5LitePod ", "v5e"),
                                             ("ironwood", "tpu7x")])
def test_a_generation_name_has_no_slice(name, canonical):
    record, piece = parse(name)
    assert (record.name, piece) == (canonical, None)


@pytest.mark.parametrize("name, error, message", [
    ("v9-8", ValueError, "unknown TPU generation 'v9-8'; expected one of v2, v3, v4, v5e"),
    ("v4-0", ValueError, "TPU slice 'v4-0': the part after the dash is '0'; expected a "
                         "positive number of TensorCores \\(e.g. 'v4-8'\\)"),
    ("v5e-x", ValueError, "the part after the dash is 'x'; expected a positive number of "
                          "chips \\(e.g. 'v5e-8'\\). Fix: 'v5e-8', or 'v5e' for the generation"),
    ("v3-", ValueError, "the part after the dash is ''"),
    (8, TypeError, "TPU name is 8 \\(int\\); expected a generation or slice name"),
])
def test_bad_tpu_names_are_refused_with_the_fix(name, error, message):
    with pytest.raises(error, match=message):
        parse(name)
