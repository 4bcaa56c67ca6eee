"""The compile cache's size limit (least recently used entries go first), its listing and
clearing, writes that are interrupted or find the disk full, and two processes sharing it.

No compiler runs here: entries are stored with ``compile_cache.store`` as a compile
stores its answer.
"""
import errno
import json
import logging
import os
import subprocess
import sys
import time

import pytest

from spatial_tf.emulator.xla import compile_cache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "compiles"
    monkeypatch.setenv(compile_cache.ENV, str(path))
    monkeypatch.delenv(compile_cache.LIMIT_ENV, raising=False)
    monkeypatch.setattr(compile_cache, "_warned", set())
    return path


def _store(name, size=1000):
    """Store an answer of exactly ``size`` bytes under the key of ``name``."""
    entry = compile_cache.key(name)
    compile_cache.store(entry, {"pad": "x" * (size - len('{"pad": ""}'))})
    return entry


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def _age(entry, folder, seconds):
    path = folder / f"{entry}.json"
    when = time.time() - seconds
    os.utime(path, (when, when))


# ------------------------------------------------------------------ the limit


@pytest.mark.parametrize("value, expected", [
    (None, 4 * 2**30), ("", 4 * 2**30), ("2GiB", 2 * 2**30), ("500MB", 500 * 10**6),
    ("1.5 GiB", 3 * 2**29), ("1048576", 2**20), ("64k", 2**16), ("0", None), ("off", None),
    ("OFF", None), ("none", None),
])
def test_the_limit_is_a_size_bytes_or_off(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(compile_cache.LIMIT_ENV, raising=False)
    else:
        monkeypatch.setenv(compile_cache.LIMIT_ENV, value)
    assert compile_cache.limit() == expected


@pytest.mark.parametrize("value", ["lots", "2 parsecs", "-5GiB", "GiB"])
def test_a_limit_that_is_not_a_size_is_refused_naming_it_and_the_fix(monkeypatch, value):
    monkeypatch.setenv(compile_cache.LIMIT_ENV, value)
    with pytest.raises(ValueError) as e:
        compile_cache.limit()
    assert str(e.value) == (
        f"SPATIAL_TF_COMPILE_CACHE_LIMIT is {value!r}; expected a size such as 2GiB or "
        f"500MB, bytes, or off for no limit. Fix: e.g. SPATIAL_TF_COMPILE_CACHE_LIMIT=2GiB, "
        f"or unset it for the default 4 GiB.")


def test_a_store_beyond_the_limit_removes_the_least_recently_used(folder, monkeypatch):
    monkeypatch.setenv(compile_cache.LIMIT_ENV, "3500")
    a, b, c = _store("a"), _store("b"), _store("c")
    _age(a, folder, 300)
    _age(b, folder, 200)
    _age(c, folder, 100)
    assert compile_cache.load(a) is not None  # read: a is now the most recently used
    d = _store("d")
    assert _names(folder) == sorted(f"{e}.json" for e in (a, c, d))  # b went
    assert compile_cache.total_size() == 3000 <= compile_cache.limit()
    e = _store("e")
    assert _names(folder) == sorted(f"{x}.json" for x in (a, d, e))  # then c


def test_a_read_marks_the_entry_used_now(folder):
    entry = _store("a")
    _age(entry, folder, 3600)
    before = compile_cache.entries()[0].last_used
    assert compile_cache.load(entry) is not None
    after = compile_cache.entries()[0].last_used
    assert after - before > 3000 and abs(after - time.time()) < 60


def test_the_entry_just_stored_stays_even_when_larger_than_the_limit(folder, monkeypatch):
    monkeypatch.setenv(compile_cache.LIMIT_ENV, "100")
    first = _store("first", 1000)
    assert _names(folder) == [f"{first}.json"]
    second = _store("second", 1000)
    assert _names(folder) == [f"{second}.json"]
    assert compile_cache.load(second) == {"pad": "x" * (1000 - len('{"pad": ""}'))}


def test_no_limit_keeps_everything(folder, monkeypatch):
    monkeypatch.setenv(compile_cache.LIMIT_ENV, "off")
    for n in range(5):
        _store(n)
    assert len(compile_cache.entries()) == 5 and compile_cache.total_size() == 5000


def test_an_unparsable_limit_warns_once_and_keeps_the_default(folder, monkeypatch, caplog):
    monkeypatch.setenv(compile_cache.LIMIT_ENV, "lots")
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        _store("a")
        _store("b")
    assert len(compile_cache.entries()) == 2
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "SPATIAL_TF_COMPILE_CACHE_LIMIT is 'lots'" in warning
    assert warning.endswith("The compile cache keeps to 4 GiB meanwhile.")
    assert "\n" not in warning


def test_eviction_skips_entries_another_process_removed_first(folder, monkeypatch):
    old, older, newer = _store("old"), _store("older"), _store("newer")
    _age(older, folder, 300)
    _age(old, folder, 200)
    _age(newer, folder, 100)
    listing = compile_cache._scan(folder)
    (folder / f"{older}.json").unlink()  # gone between the listing and the removal
    monkeypatch.setattr(compile_cache, "_scan", lambda f: listing)
    monkeypatch.setenv(compile_cache.LIMIT_ENV, "2500")
    compile_cache._evict(folder, keep=folder / f"{newer}.json")  # no error
    # the vanished one counts as gone: 2000 bytes are left, within the limit
    assert _names(folder) == sorted([f"{old}.json", f"{newer}.json"])


# ------------------------------------------------------------------ list and clear


def test_entries_total_and_clear(folder):
    assert compile_cache.entries() == [] and compile_cache.total_size() == 0  # no folder
    a = _store("a", 1000)
    b = _store("b", 2000)
    compile_cache.store_bytes(compile_cache.key("c"), b"\0" * 300)  # a CPU executable
    _age(a, folder, 100)
    _age(b, folder, 50)
    (folder / "notes.json").write_text("{}")  # not an entry: never listed nor removed
    found = compile_cache.entries()
    assert [(e.path.name, e.size) for e in found] == [
        (f"{compile_cache.key('c')}.bin", 300), (f"{b}.json", 2000), (f"{a}.json", 1000)]
    assert found[0].last_used > found[1].last_used > found[2].last_used
    assert compile_cache.total_size() == 3300
    assert compile_cache.clear() == (3, 3300)
    assert _names(folder) == ["notes.json"]
    assert compile_cache.clear() == (0, 0)


def test_a_cache_that_is_off_lists_and_clears_nothing(monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, "off")
    assert compile_cache.entries() == [] and compile_cache.total_size() == 0
    assert compile_cache.clear() == (0, 0)


# ------------------------------------------------------------------ interrupted writes


def test_a_write_interrupted_half_way_leaves_no_entry_and_no_temporary_file(folder,
                                                                          monkeypatch):
    folder.mkdir()

    def interrupted(src, dst):
        raise KeyboardInterrupt  # e.g. Ctrl-C while the answer is written

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _store("a")
    assert _names(folder) == []


def test_a_full_disk_warns_once_in_one_line_and_leaves_nothing(folder, monkeypatch, caplog):
    folder.mkdir()

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        _store("a")
        _store("b")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"spatial_tf: compile results are not cached: no space left "
                              f"on the disk of {folder} ([Errno 28] No space left on device)")
    assert "Fix: free space there (python -m spatial_tf cache clear" in warning
    assert "\n" not in warning
    assert _names(folder) == []  # no entry, no temporary file
    assert compile_cache.load(compile_cache.key("a")) is None


@pytest.mark.slow  # tpu_compile imports TensorFlow
def test_a_full_disk_still_gives_the_compilers_answer(folder, monkeypatch):
    from spatial_tf.emulator.tpu import tpu_compile

    answer = {"status": "compiled", "device_kind": "TPU v5 lite", "seconds": 1.0,
              "memory": {"argument": 1, "output": 2, "alias": 0, "temp": 3, "code": 4},
              "cost": {}}
    monkeypatch.setattr(tpu_compile, "check_compiler", lambda name, target: "0.0.42.1")
    monkeypatch.setattr(tpu_compile, "_run_worker", lambda *args: dict(answer))
    folder.mkdir()

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    program = tpu_compile.compile_for_tpu(b"", 1, "v5e", waiting=tpu_compile.Waiting(progress=False))
    assert program.fits and program.memory["temp"] == 3 and not program.cached
    # no entry, no temporary file (the record of compile times is appended, not replaced)
    assert [n for n in _names(folder) if n != compile_cache.TIMES_FILE] == []


def test_partial_files_of_killed_writers_are_removed_after_an_hour(folder):
    folder.mkdir()
    stale = folder / f"{compile_cache.key('stale')}.k2j4_9ab.partial"
    fresh = folder / f"{compile_cache.key('fresh')}.q8w7_1cd.partial"
    theirs = folder / "notes.partial"  # not written by the cache: left alone
    for path in (stale, fresh, theirs):
        path.write_bytes(b"half an answer")
    two_hours_ago = time.time() - 7200
    for path in (stale, theirs):
        os.utime(path, (two_hours_ago, two_hours_ago))
    entry = _store("a")
    assert _names(folder) == sorted([f"{entry}.json", fresh.name, theirs.name])
    os.utime(fresh, (two_hours_ago, two_hours_ago))
    assert compile_cache.clear() == (1, 1000)
    assert _names(folder) == [theirs.name]


# ------------------------------------------------------------------ two processes


WRITER = """
import sys
from spatial_tf.emulator.xla import compile_cache as cache

name = sys.argv[1]
for i in range(150):
    cache.store(cache.key("shared"), {"by": name, "i": i, "pad": "s" * (100 * (i % 7))})
    cache.store(cache.key(name, i), {"i": i, "pad": "y" * 500})
    cache.load(cache.key(name, i // 2))
"""


def test_two_processes_sharing_the_folder_leave_it_whole(folder):
    env = {**os.environ, "PYTHONPATH": REPO, compile_cache.ENV: str(folder),
           compile_cache.LIMIT_ENV: "4000"}  # a few entries: each store evicts
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, name], env=env, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name in ("one", "two")]
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0 and err == "", err[-2000:]
    names = _names(folder)
    assert names and not [n for n in names if n.endswith(".partial")]
    for name in names:
        json.loads((folder / name).read_text())  # every entry whole
    shared = compile_cache.load(compile_cache.key("shared"))
    assert shared is not None and shared["i"] == 149  # the last store of either process
    # each process keeps the entry it stored last, even past the limit
    assert compile_cache.total_size() <= 4000 + 2 * 1000
