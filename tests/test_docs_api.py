"""The API reference (pdoc) builds and documents every public name."""
import pathlib
import re

import pytest

import spatial_tf

pdoc = pytest.importorskip("pdoc", reason="pdoc builds the API reference: pip install 'spatial-tf[test]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("api")
    pdoc.pdoc("spatial_tf", output_directory=out)
    return out


def _ids(page: pathlib.Path):
    return set(re.findall(r'id="([A-Za-z_][A-Za-z0-9_]*)"', page.read_text()))


def test_the_api_page_names_every_top_level_name_and_subpackage():
    text = (pathlib.Path(__file__).parents[1] / "docs" / "api.md").read_text()
    missing = [n for n in spatial_tf.__all__ if f"`{n}`" not in text]
    assert len(spatial_tf.__all__) > 30 and not missing, f"not named in docs/api.md: {missing}"


@pytest.mark.slow
def test_every_top_level_name_is_documented(site):
    names = spatial_tf.__all__
    assert "split" in names and "Emulator" in names
    top = _ids(site / "spatial_tf.html")
    missing = [n for n in names if n not in spatial_tf._SUBPACKAGES and n not in top]
    assert not missing, f"not in the API reference: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("subpackage", spatial_tf._SUBPACKAGES)
def test_every_subpackage_name_is_documented(site, subpackage):
    page = site / "spatial_tf" / f"{subpackage}.html"
    assert page.exists(), f"no page for spatial_tf.{subpackage}"
    names = getattr(getattr(spatial_tf, subpackage), "__all__", [])
    missing = [n for n in names if n not in _ids(page)]
    assert not missing, f"spatial_tf.{subpackage}: not in the API reference: {missing}"


@pytest.mark.slow
def test_docstrings_are_rendered(site):
    text = (site / "spatial_tf.html").read_text()
    # the module docstring's example and split()'s docstring reach the page
    assert "spatial_tf.validate(batch" in text.replace("&quot;", '"')
    assert "Tile(1, 4, 1, 1)" in text
