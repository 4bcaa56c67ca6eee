"""The record of TPU compile times and the expected time a progress line shows.

No compiler runs here: compiles are recorded with ``compile_times.record`` as
``tpu_compile`` records each finished one.
"""
import json

import pytest

from spatial_tf.emulator.tpu import compile_times, tpu_compile
from spatial_tf.emulator.xla import compile_cache


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "compiles"
    monkeypatch.setenv(compile_cache.ENV, str(path))
    return path


def test_nothing_recorded_means_no_expectation(folder):
    assert compile_times.expected("v5e", 8, 1000) is None
    assert not folder.exists()


def test_median_of_the_nearest_three_similar_fitting_compiles(folder):
    for size, seconds in [(1000, 100.0), (1100, 120.0), (900, 80.0), (1900, 500.0),
                          (950, 1000.0)]:
        compile_times.record("v5e", 8, size, True, seconds)
    # nearest three to 1000 by size ratio: 1000 (100), 950 (1000), 1100 (120)
    assert compile_times.expected("v5e", 8, 1000) == compile_times.Expected(120.0, 3)


def test_only_similar_sizes_of_the_same_generation_and_cores_count(folder):
    compile_times.record("v5e", 8, 1000, True, 100.0)
    compile_times.record("v5e", 8, 5000, True, 300.0)  # 5x larger
    compile_times.record("v3", 8, 1000, True, 50.0)
    compile_times.record("v5e", 4, 1000, True, 70.0)
    assert compile_times.expected("v5e", 8, 1000) == compile_times.Expected(100.0, 1)
    assert compile_times.expected("v5e", 8, 2000) == compile_times.Expected(100.0, 1)
    assert compile_times.expected("v5e", 8, 2001) is None
    assert compile_times.expected("v5e", 8, 2500) == compile_times.Expected(300.0, 1)
    assert compile_times.expected("v5e", 8, 500) == compile_times.Expected(100.0, 1)
    assert compile_times.expected("v5e", 8, 499) is None
    assert compile_times.expected("v3", 8, 1000) == compile_times.Expected(50.0, 1)
    assert compile_times.expected("v5e", 4, 1000) == compile_times.Expected(70.0, 1)
    assert compile_times.expected("v5e", 2, 1000) is None


def test_out_of_memory_compiles_say_nothing_of_fitting_ones(folder):
    compile_times.record("v5e", 8, 1000, False, 4.0)
    assert compile_times.expected("v5e", 8, 1000) is None
    lines = (folder / compile_times.FILE).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"generation": "v5e", "cores": 8, "bytes": 1000, "fits": False, "seconds": 4.0}]


def test_broken_lines_are_skipped(folder):
    compile_times.record("v5e", 8, 1000, True, 100.0)
    with open(folder / compile_times.FILE, "a") as f:
        f.write('{"generation": "v5e", "cores": 8, "byt\n[1, 2]\nnot json\n')
    compile_times.record("v5e", 8, 1000, True, 200.0)
    assert compile_times.expected("v5e", 8, 1000) == compile_times.Expected(150.0, 2)


def test_cache_off_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, "off")
    compile_times.record("v5e", 8, 1000, True, 100.0)
    assert compile_times.expected("v5e", 8, 1000) is None
    assert list(tmp_path.iterdir()) == []


def test_unwritable_folder_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv(compile_cache.ENV, str(blocker / "compiles"))
    compile_times.record("v5e", 8, 1000, True, 100.0)  # no exception
    assert compile_times.expected("v5e", 8, 1000) is None


def test_clear_removes_the_record(folder):
    compile_times.record("v5e", 8, 1000, True, 100.0)
    compile_cache.store(compile_cache.key("x"), {"status": "compiled"})
    assert compile_cache.clear()[0] == 1
    assert list(folder.iterdir()) == []
    assert compile_times.expected("v5e", 8, 1000) is None


@pytest.mark.parametrize("seconds, compiles, text", [
    (100.0, 2, "about 1 min 40 s if it fits, as 2 similar compiles took here"),
    (59.6, 1, "about 1 min 0 s if it fits, as 1 similar compile took here"),
    (7.2, 3, "about 7 s if it fits, as 3 similar compiles took here"),
])
def test_expected_text(seconds, compiles, text):
    assert compile_times.expected_text(compile_times.Expected(seconds, compiles)) == text


def test_progress_line_carries_the_expected_time(capsys):
    with tpu_compile._Progress("step: compiling", True, "about 5 s if it fits"):
        pass
    assert capsys.readouterr().err == "step: compiling ... (about 5 s if it fits)\n"
    with tpu_compile._Progress("step: compiling", True):
        pass
    assert capsys.readouterr().err == "step: compiling ...\n"
    with tpu_compile._Progress("step: compiling", False, "about 5 s"):
        pass
    assert capsys.readouterr().err == ""
