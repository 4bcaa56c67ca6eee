"""spatial_tf.viz: the slice and memory figures."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from spatial_tf import viz  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_slices_figure_rows_columns_and_pixels():
    image = np.arange(4 * 5 * 6, dtype=float).reshape(4, 5, 6)
    labels = (image % 3).astype(int)
    fig = viz.slices_figure(image[..., None], labels, labels, slices=[0, 3], title="t")
    assert [ax.get_title() for ax in fig.axes] == [
        "input, slice 0 of 4 along D (axis 0)", "label", "prediction",
        "input, slice 3 of 4 along D (axis 0)", "label", "prediction"]
    np.testing.assert_array_equal(fig.axes[3].images[0].get_array(), image[3])
    np.testing.assert_array_equal(fig.axes[4].images[0].get_array(), labels[3])
    assert fig.axes[4].images[0].get_clim() == (0, 2)
    assert fig._suptitle.get_text() == "t"


def test_slices_figure_other_axis_and_default_middle_slice():
    image = np.random.default_rng(0).normal(size=(4, 5, 6))
    fig = viz.slices_figure(image, axis=2)
    assert [ax.get_title() for ax in fig.axes] == ["input, slice 3 of 6 along W (axis 2)"]
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), image[:, :, 3])
    assert fig._suptitle is None


def test_the_default_slice_is_the_most_labelled_and_the_legend_names_the_classes():
    image = np.zeros((6, 4, 4))
    labels = np.zeros((6, 4, 4), int)
    labels[1, :2, :2] = 2      # 4 labelled voxels on slice 1
    labels[4, :, :3] = 1       # 12 on slice 4
    prediction = np.zeros((6, 4, 4), int)
    prediction[0] = 1          # a prediction's slice counts only without labels
    fig = viz.slices_figure(image, labels, prediction)
    assert fig.axes[0].get_title() == "input, slice 4 of 6 along D (axis 0)"
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["background", "class 1", "class 2"]
    assert viz.slices_figure(image, prediction=prediction).axes[0].get_title() == \
        "input, slice 0 of 6 along D (axis 0)"
    along_w = viz.slices_figure(image, labels, axis=2).axes[0].get_title()
    assert along_w == "input, slice 0 of 4 along W (axis 2)"   # columns 0, 1: 6 voxels, 2: 4
    axial = viz.slices_figure(image, labels, axis=-1, plane="axial").axes[0].get_title()
    assert axial == "input, axial slice 0 of 4 (axis 2)"
    named = viz.slices_figure(image, labels, class_names=["air", "organ", "lesion"])
    assert [t.get_text() for t in named.legends[0].get_texts()] == ["air", "organ", "lesion"]
    assert viz.slices_figure(image).legends == []    # no masks, no legend


@pytest.mark.parametrize("kwargs, message", [
    (dict(image=np.zeros((4, 4, 4)), labels=np.full((4, 4, 4), 2), class_names=["a", "b"]),
     "class_names has 2 names; expected one per class, 3 (the masks hold classes 0..2)"),
    (dict(image=np.zeros((2, 4, 4, 4, 1))), "has shape (2, 4, 4, 4, 1); expected a [D, H, W]"),
    (dict(image=np.zeros((4, 4, 4)), labels=np.zeros((4, 4))), "label has shape (4, 4)"),
    (dict(image=np.zeros((4, 4, 4)), prediction=np.zeros((4, 4, 5))), "prediction has shape"),
    (dict(image=np.zeros((4, 4, 4)), slices=[4]), "slice 4 is outside the volume; expected 0..3"),
    (dict(image=np.zeros((4, 4, 4)), slices=[-1]), "slice -1 is outside"),
    (dict(image=np.zeros((4, 4, 4)), axis=3), "axis is 3; expected 0, 1 or 2"),
])
def test_slices_figure_refuses(kwargs, message):
    image = kwargs.pop("image")
    with pytest.raises(ValueError, match="slices_figure: ") as e:
        viz.slices_figure(image, **kwargs)
    assert message in str(e.value)


class _Report:  # the fields memory_figure reads, with values it must plot as given
    function = "step"
    num_cores_per_replica = 4
    partitioned = {"argument": 1 * 2**20, "temp": 2 * 2**20, "output": 0.5 * 2**20}
    unpartitioned = {"argument": 4 * 2**20, "temp": 8 * 2**20, "output": 2 * 2**20}


def test_memory_figure_bars_in_mib():
    fig = viz.memory_figure(_Report())
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == [4, 2, 8, 1, 0.5, 2]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["argument", "output", "temp"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "unpartitioned", "per core, 4 cores"]
    assert ax.get_title() == "step: memory per core"


def test_clip_cores_numbers_cores_row_major_over_the_spec():
    cores = viz.clip_cores((4, 8, 6, 4, 3), [2, 2, 1, 2, 1], example=2)   # 2nd batch piece
    assert cores.shape == (8, 6, 4)
    assert cores[0, 0, 0] == 4 and cores[0, 5, 3] == 5 and cores[7, 0, 0] == 6
    assert set(np.unique(viz.clip_cores((1, 4, 4, 4, 1), [1, 4, 1, 1, 1])[:, 0, 0])) == {0, 1, 2, 3}
    for shape, spec, message in [((1, 4, 4, 4, 2), [1, 1, 1, 1, 2], "splits the channels"),
                                 ((1, 3, 4, 4, 1), [1, 2, 1, 1, 1], "do not divide"),
                                 ((1, 4, 4, 4), [1, 2, 2, 1], "rank 5")]:
        with pytest.raises(ValueError, match=message):
            viz.clip_cores(shape, spec)


def test_clip_layout_figure_one_panel_per_frame_and_a_legend_per_core():
    clip = np.random.default_rng(0).normal(size=(1, 4, 8, 8, 1))
    fig = viz.clip_layout_figure(clip, [1, 2, 2, 1, 1])
    assert [ax.get_title() for ax in fig.axes] == [f"frame {t}" for t in range(4)]
    np.testing.assert_array_equal(fig.axes[3].images[0].get_array(), clip[0, 3, :, :, 0])
    np.testing.assert_array_equal(fig.axes[3].images[1].get_array(),
                                  np.repeat([[2], [3]], 4, axis=0) * np.ones((1, 8)))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "core 0: frames 0-1, rows 0-3, columns 0-7", "core 1: frames 0-1, rows 4-7, columns 0-7",
        "core 2: frames 2-3, rows 0-3, columns 0-7", "core 3: frames 2-3, rows 4-7, columns 0-7"]
    many = viz.clip_layout_figure((1, 32, 16, 16, 3), [1, 4, 1, 1, 1])   # a shape: colours only
    assert len(many.axes) == 8 and many.axes[-1].get_title() == "frame 31"
