"""Strong scaling: the fastest spec the TPU compiler fits on each core count."""
import pytest
import tensorflow as tf

from spatial_tf import planning
from spatial_tf.emulator.tpu import tpu_compile
from spatial_tf.emulator.xla import compile_cache

from tpu_steps import needs_libtpu


SHAPE = (4, 256, 256, 8)


@pytest.fixture(autouse=True)
def cache_folder(tmp_path_factory, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path_factory.getbasetemp() / "scaling"))


@pytest.fixture(scope="module")
def step():
    kernel = tf.Variable(tf.ones([3, 3, 8, 8]))

    def conv_step(x):
        return tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME") ** 2)

    return conv_step


@needs_libtpu
def test_each_count_keeps_its_fastest_fitting_spec_and_the_cost_follows(step, tmp_path):
    found = planning.scaling(step, SHAPE, cores=(4, 1, 2), budget="v5e",
                             price_per_chip_hour=1.2,
                             options=planning.PlanOptions(progress=False))
    assert [r.num_cores for r in found.rows] == [1, 2, 4]
    for row in found.rows:
        timed = [c.step_time for c in row.plan.candidates if c.fits]
        assert row.best.fits and row.step_time == min(timed)
        assert row.examples_per_second == pytest.approx(4 / row.step_time)
        # v5e: one core a chip; 1.2 per chip-hour for the step's chips, per 1,000 examples
        assert row.cost_per_1000(1.2) == pytest.approx(
            1.2 * row.num_cores * row.step_time / 3600 * 1000 / 4)
    one, two, four = found.rows
    assert found.speedup(one) == 1.0
    assert found.speedup(four) == pytest.approx(one.step_time / four.step_time)
    assert four.step_time < one.step_time
    text = str(found)
    assert "strong scaling on v5e" in text and "cost / 1k examples" in text
    assert "Step est. and fits: the TPU compiler for v5e (XLA:TPU, libtpu" in text
    path = planning.plot_scaling(found, str(tmp_path / "scaling.png"))
    assert (tmp_path / "scaling.png").stat().st_size > 10_000 and path.endswith(".png")


def test_without_the_tpu_compiler_no_time_is_given_and_it_says_why(step, monkeypatch):
    monkeypatch.setattr(tpu_compile, "libtpu_version", lambda: None)
    found = planning.scaling(step, (1, 64, 64, 8), cores=(1, 2), budget="v5e",
                             options=planning.PlanOptions(progress=False))
    assert found.source is None
    assert [r.step_time for r in found.rows] == [None, None]
    assert "Step est.: none: XLA's TPU compiler (libtpu) is not installed" in str(found)


@pytest.mark.parametrize("kwargs, message", [
    ({"cores": ()}, "scaling: cores=\\(\\); expected core counts such as \\(1, 2, 4, 8\\)"),
    ({"budget": "16GiB"}, "scaling: budget='16GiB' names no TPU generation"),
    ({"price_per_chip_hour": 0}, "scaling: price_per_chip_hour=0; expected a positive price"),
])
def test_bad_arguments_are_refused_before_any_compile(step, kwargs, message):
    with pytest.raises(ValueError, match=message):
        planning.scaling(step, SHAPE, **{"cores": (1, 2), "budget": "v5e", **kwargs})
