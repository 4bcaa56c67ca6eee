"""Memory against size: the line through small compiles predicts compiles it did not see."""
import math

import pytest

import spatial_tf
from spatial_tf.models import unet3d
from spatial_tf.planning import PlanOptions, Training
from spatial_tf.planning.fit import LinearFit, fewest_cores, largest_edge


def test_linear_fit_recovers_a_line_and_reports_errors():
    f = LinearFit.from_points([1000, 2000, 4000], [5000 + 3 * v for v in (1000, 2000, 4000)])
    assert f.a == pytest.approx(5000) and f.b == pytest.approx(3)
    assert f.predict(10_000) == pytest.approx(35_000)
    assert f.error(10_000, 35_000) == pytest.approx(0, abs=1e-12)
    assert f.error(10_000, 50_000) == pytest.approx(-0.3)
    assert f.max_voxels(5000 + 3 * 27_000) == pytest.approx(27_000)
    assert f.max_voxels(4000) == 0


def test_largest_edge_and_fewest_cores():
    f = LinearFit(1000.0, 2.0, ())
    assert largest_edge(f, 1000 + 2 * 40**3) == 40
    assert largest_edge(f, 1000 + 2 * 40**3 - 1) == 39
    assert largest_edge(f, 1000 + 2 * 40**3, multiple=16) == 32
    with pytest.raises(ValueError, match="the fitted memory does not grow with the volume"):
        largest_edge(LinearFit(5.0, 0.0, ()), 10)
    fits = {1: LinearFit(100, 8.0, ()), 4: LinearFit(100, 2.0, ()), 8: LinearFit(100, 1.0, ())}
    assert fewest_cores(fits, 1000, 8100) == 1
    assert fewest_cores(fits, 1000, 2100) == 4
    assert fewest_cores(fits, 1000, 1100) == 8
    assert fewest_cores(fits, 1000, 1000) is None


def test_one_size_cannot_be_fitted():
    with pytest.raises(ValueError, match=r"fit: 1 distinct size measured"):
        LinearFit.from_points([8, 8], [1, 2])


def _unet(shape):
    return unet3d(shape, num_classes=2, depth=2, base_filters=4)


@pytest.mark.slow
def test_fit_is_within_ten_percent_of_direct_compiles_it_did_not_see():
    target = (1, 48, 48, 48, 1)
    fitted = spatial_tf.plan(_unet((16, 16, 16, 1)), target, 2, specs=[(1, 2, 1, 1, 1)],
                             options=PlanOptions(fit_sizes=(16, 24, 32), fit_check=40,
                                                 progress=False),
                             training=Training(model_fn=_unet))
    direct = spatial_tf.plan(_unet(target[1:]), target, 2, specs=[(1, 2, 1, 1, 1)],
                             options=PlanOptions(progress=False))
    f, d = fitted.candidates[0], direct.candidates[0]
    assert f.predicted and not d.predicted
    for basis in ("cpu", "tpu"):
        assert abs(f.peak(basis) - d.peak(basis)) / d.peak(basis) < 0.10, (basis, f.peak(basis), d.peak(basis))
        assert abs(f.fit[basis].error(48**3, d.peak(basis))) < 0.10
    check = f.fit["check"]
    assert check["edge"] == 40 and abs(check["error"]) < 0.10 and abs(check["tpu_error"]) < 0.10
    # halo bytes move faces: predicted within 10% too
    assert abs(f.halo_bytes - d.halo_bytes) / d.halo_bytes < 0.10
    # the capacity answer: on 2 cores within the fitted peak at 48^3, 48 is the largest
    edge, best = fitted.with_budget(int(d.peak("tpu") * 1.001)).largest_edge(multiple=2)
    assert best.spec == (1, 2, 1, 1, 1) and edge in (46, 48, 50)
    assert math.isclose(f.fit["tpu"].predict(48**3), f.peak("tpu"), rel_tol=1e-6)
