"""Searches by TPU compiles: the fewest cores and the largest cube the TPU compiler fits.

The programs are one 3x3 convolution of an 8-channel image of 16384^2 (8 GiB in float32):
the TPU compiler refuses it on 1, 2 and 4 v5e cores and fits it on 8 (measured with
libtpu 0.0.42.1), so the verdicts change within a few core counts and each compile takes
seconds.
"""
import numpy as np
import pytest
import tensorflow as tf

from spatial_tf import planning
from spatial_tf.emulator import Emulator
from spatial_tf.emulator.tpu import tpu_compile
from spatial_tf.emulator.xla import compile_cache
from spatial_tf.planning.candidates import candidate_specs

pytestmark = pytest.mark.skipif(
    tpu_compile.libtpu_version() is None,
    reason="needs libtpu (XLA's TPU compiler): pip install 'spatial-tf[tpu-compile]'")

SHAPE = (1, 16384, 16384, 8)


@pytest.fixture(autouse=True)
def cache_folder(tmp_path_factory, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path_factory.getbasetemp() / "search"))


@pytest.fixture(scope="module")
def step():
    kernel = tf.Variable(tf.ones([3, 3, 8, 8]))

    def conv_step(x):
        return tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME") ** 2)

    return conv_step


def test_fewest_cores_is_what_compiling_every_spec_at_every_count_gives(step):
    found = planning.search_fewest_cores(step, SHAPE, "v5e", core_counts=(1, 2, 4, 8))
    # brute force: every spec at every count, compiled by the TPU compiler directly
    fitting = []
    for cores in (1, 2, 4, 8):
        emulator = Emulator(cores)
        for spec in candidate_specs(SHAPE, cores):
            def split_step(x, spec=spec):
                import spatial_tf

                return step(spatial_tf.split(x, list(spec)))

            if emulator.compile(split_step, (np.broadcast_to(np.float32(0), SHAPE),),
                                target="v5e").fits:
                fitting.append(cores)
    assert fitting, "some count must fit for the test to mean anything"
    assert 1 not in fitting, "one core must not fit for the test to mean anything"
    assert found.answer == min(fitting)
    assert [p.fits for p in found.probes].count(True) == 1  # one fitting compile
    assert found.probes[-1].fits and found.probes[-1].num_cores == found.answer
    assert all(p.num_cores <= found.answer for p in found.probes)
    assert found.plan.recommended.fits
    assert "the TPU compiler for v5e" in found.source
    assert f"Answer: {found.answer} (" in str(found)


def test_nothing_fits_gives_no_answer(step):
    found = planning.search_fewest_cores(step, SHAPE, "v5e", core_counts=(1,))
    assert found.answer is None and found.plan is None
    assert [p.fits for p in found.probes] == [False] * len(found.probes)
    assert "Answer: none fits" in str(found)


def test_largest_edge_closes_on_a_fitting_edge_with_the_next_refused(step):
    found = planning.search_largest_edge(step, (1, 1024, 1024, 8), 2, "v5e",
                                         edges=range(1024, 16385, 1024))
    edge = found.answer
    assert edge is not None and edge % 1024 == 0
    verdicts = {p.shape[1]: p.fits for p in found.probes}
    assert verdicts[edge] is True
    refused = [e for e, fits in verdicts.items() if not fits]
    assert refused and min(refused) == edge + 1024  # the search closed on the boundary
    assert all(fits for e, fits in verdicts.items() if e <= edge)
    assert found.probes[0].shape[1] == 16384  # from the top down: refusals are quick
    assert sum(p.fits for p in found.probes) <= 2


def test_a_search_needs_a_tpu_to_compile_for(step):
    with pytest.raises(ValueError, match="search: no TPU to compile for; expected a budget "
                                         "naming a TPU generation"):
        planning.search_fewest_cores(step, SHAPE, None)


@pytest.mark.parametrize("edges", [range(64, 0, 64), range(10, 100, 64), [64, 128], range(64, 1, -1)])
def test_edges_must_be_a_range_of_multiples_of_its_step(edges):
    with pytest.raises(ValueError, match=r"search_largest_edge: edges is .*; expected a "
                                         r"non-empty range of multiples of its step"):
        planning.search_largest_edge(lambda x: x, (1, 64, 64, 1), 2, "v5e", edges=edges)


def test_earlier_keywords_warn_and_unknown_ones_are_refused():
    from spatial_tf.planning.search import _edge_range

    with pytest.warns(DeprecationWarning, match=r"pass edges=range\(8, 64 \+ 1, 8\)"):
        assert _edge_range(None, {"multiple": 8, "high": 64}) == (8, 64)
    assert _edge_range(range(16, 129, 16), {}) == (16, 128)
    assert _edge_range(None, {}) == (1, None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'top'"):
        planning.search_largest_edge(lambda x: x, (1, 64, 64, 1), 2, "v5e", top=64)
