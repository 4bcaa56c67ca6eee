import re

from spatial_tf.__main__ import main


def test_demo_prints_layout_shardings_and_a_falling_loss(capsys):
    assert main(["demo", "--steps", "10", "--size", "32", "--cores", "4"]) == 0
    out = capsys.readouterr().out
    assert "features['image']       (4, 32, 32, 3)  float32  Tile(1, 4, 1, 1)  (4, 8, 32, 3)" in out
    assert "{devices=[1,4,1,1]0,1,2,3}" in out and "{devices=[1,2,2,1]0,1,2,3}" in out
    losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", out)]
    assert len(losses) == 3 and losses[-1] < losses[0]


def test_help_lists_commands(capsys):
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out
