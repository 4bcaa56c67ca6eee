"""Compiles kept across processes: keys that ignore the trace's names, CPU executables
loaded back and run, a damaged entry compiled again, a folder that cannot be written."""
import logging

import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator import Emulator
from spatial_tf.emulator.xla import _xla, compile_cache


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "compiles"
    monkeypatch.setenv(compile_cache.ENV, str(path))
    return path


def _step():
    def step(x):  # a new function object each call: a new trace, new TensorFlow names
        return tf.reduce_sum(spatial_tf.split(x, [1, 2]) ** 2)

    return step


def test_the_same_step_traced_twice_has_one_key_and_another_step_another():
    first = Emulator(2).lower(_step(), (tf.ones([4, 8]),)).traced.hlo
    again = Emulator(2).lower(_step(), (tf.ones([4, 8]),)).traced.hlo
    assert first != again  # TensorFlow named them apart
    assert compile_cache.program_key(first, "cpu") == compile_cache.program_key(again, "cpu")
    assert compile_cache.program_key(first, "cpu") != compile_cache.program_key(first, "tpu")
    other = Emulator(2).lower(_step(), (tf.ones([4, 16]),)).traced.hlo
    assert compile_cache.program_key(other, "cpu") != compile_cache.program_key(first, "cpu")


def test_a_cpu_executable_is_loaded_back_and_runs(folder, monkeypatch):
    loaded = []
    original = _xla._load_executable

    def spy(*args):
        loaded.append(original(*args))
        return loaded[-1]

    monkeypatch.setattr(_xla, "_load_executable", spy)
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    first = Emulator(2).run(_step(), args=(x,))
    assert loaded == [None] and len(list(folder.glob("*.bin"))) == 1
    again = Emulator(2).run(_step(), args=(x,))
    assert loaded[-1] is not None  # the second process-wide compile read the cache
    assert float(again) == float(first) == float((x ** 2).sum())


def test_a_damaged_entry_is_compiled_again(folder):
    Emulator(2).compile(_step(), (tf.ones([4, 8]),))
    (entry,) = folder.glob("*.bin")
    entry.write_bytes(b"not an executable")
    compiled = Emulator(2).compile(_step(), (tf.ones([4, 8]),))
    assert compiled.memory()["argument"] == 4 * 8 * 4 // 2
    assert entry.read_bytes() != b"not an executable"  # replaced by the new compile


def test_cache_off_keeps_nothing(tmp_path, monkeypatch):
    for off in ("off", "0", ""):
        monkeypatch.setenv(compile_cache.ENV, off)
        assert compile_cache.directory() is None
    compile_cache.store("k", {"a": 1})
    assert compile_cache.load("k") is None


def test_the_default_folder_is_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.directory() == tmp_path / "spatial_tf" / "compiles"


def test_a_folder_that_cannot_be_written_warns_once_and_goes_on(tmp_path, monkeypatch, caplog):
    blocked = tmp_path / "a file"
    blocked.write_text("")
    monkeypatch.setenv(compile_cache.ENV, str(blocked / "compiles"))
    monkeypatch.setattr(compile_cache, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        compile_cache.store("k", {"a": 1})
        compile_cache.store("k2", {"a": 2})
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "compile results are not cached" in warnings[0] and "cannot be written" in warnings[0]
    assert f"Fix: set {compile_cache.ENV} to a writable folder" in warnings[0]
    assert compile_cache.load("k") is None


def test_a_cpu_executable_is_kept_per_host_processor(folder, monkeypatch):
    Emulator(2).compile(_step(), (tf.ones([4, 8]),))
    assert len(list(folder.glob("*.bin"))) == 1
    monkeypatch.setattr(compile_cache, "host_cpu", lambda: "another processor")
    Emulator(2).compile(_step(), (tf.ones([4, 8]),))
    assert len(list(folder.glob("*.bin"))) == 2  # not the other machine's executable
