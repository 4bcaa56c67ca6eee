"""moving_squares: each class moves its square its own way; seeded; argument checks."""
import numpy as np
import pytest

from spatial_tf.data import MOVING_SQUARES_CLASSES, moving_squares

# (rows, columns) the square's corner moves per frame, by class name
MOVES = {"right": (0, 1), "left": (0, -1), "down": (1, 0), "up": (-1, 0)}


def _corner(frame):
    return np.argwhere(frame[:, :, 0] > 0.5).min(axis=0)


def test_the_square_moves_the_way_its_label_says():
    frames, size = 4, 32
    clips, labels = moving_squares(40, frames=frames, size=size, seed=1)
    speed, side = size // (2 * frames), size // 4
    assert sorted(set(labels.tolist())) == [0, 1, 2, 3]
    for clip, label in zip(clips, labels):
        dy, dx = MOVES[MOVING_SQUARES_CLASSES[label]]
        corners = [_corner(frame) for frame in clip]
        for t in range(frames - 1):
            step = (corners[t + 1] - corners[t]) % (size - side)   # wrapping around
            assert tuple(step) == (dy * speed % (size - side), dx * speed % (size - side))
        bright = clip[0, :, :, 0] > 0.5
        assert bright.sum() == side * side   # one square of side size // 4


def test_shapes_dtypes_and_seeds():
    clips, labels = moving_squares(3, frames=5, size=12, seed=7)
    assert clips.shape == (3, 5, 12, 12, 1) and clips.dtype == np.float32
    assert labels.shape == (3,) and labels.dtype == np.int32
    again, same = moving_squares(3, frames=5, size=12, seed=7)
    assert np.array_equal(clips, again) and np.array_equal(labels, same)
    other, _ = moving_squares(3, frames=5, size=12, seed=8)
    assert not np.array_equal(clips, other)


@pytest.mark.parametrize("kwargs,error,words", [
    ({"n": 0}, ValueError, "moving_squares: n is 0; expected a positive int"),
    ({"n": 2, "frames": 2.5}, TypeError, "frames is 2.5 (float)"),
    ({"n": 2, "size": 3}, ValueError, "size is 3; expected an int >= 4"),
])
def test_bad_arguments_are_named_with_a_fix(kwargs, error, words):
    with pytest.raises(error) as e:
        moving_squares(**kwargs)
    assert words in str(e.value) and "Fix: e.g. moving_squares(32" in str(e.value)
