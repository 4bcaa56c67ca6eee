"""python -m spatial_tf cache: the compile cache's folder, entries, size and limit;
cache clear empties it. Run as a user runs it, in a subprocess, on a folder filled with
entries as compiles store them (compile_cache.store)."""
import os
import subprocess
import sys
import time

import pytest

from spatial_tf.emulator.xla import compile_cache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = "python -m spatial_tf cache"


def cli(*argv, **env):
    return subprocess.run([sys.executable, "-m", "spatial_tf", "cache", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO, **env})


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A cache folder holding 12 TPU compiles (1 to 12 KiB) and one CPU executable."""
    path = tmp_path / "compiles"
    monkeypatch.setenv(compile_cache.ENV, str(path))
    monkeypatch.delenv(compile_cache.LIMIT_ENV, raising=False)
    now = time.time()
    for n in range(1, 13):  # used one minute apart, the largest last
        compile_cache.store(compile_cache.key(n), {"pad": "x" * (n * 1024 - 11)})
        os.utime(path / f"{compile_cache.key(n)}.json", (now - 60 * (13 - n),) * 2)
    compile_cache.store_bytes(compile_cache.key("cpu"), b"\0" * 20 * 1024)
    return path


def test_cache_lists_folder_count_size_limit_and_the_most_recent(folder):
    done = cli(SPATIAL_TF_COMPILE_CACHE=str(folder))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == f"Compile cache: {folder}"
    assert lines[1] == ("13 compile results, 98.0 KiB of a 4.0 GiB limit "
                        "(SPATIAL_TF_COMPILE_CACHE_LIMIT)")
    assert lines[3] == "Most recently used:"
    assert lines[4].split() == ["last", "used", "size", "kind", "entry"]
    rows = lines[6:-1]
    assert len(rows) == 10
    assert rows[0].split()[2:] == ["20.0", "KiB", "CPU", "executable",
                                   compile_cache.key("cpu")[:12]]
    assert rows[1].split()[2:] == ["12.0", "KiB", "TPU", "compile", compile_cache.key(12)[:12]]
    assert lines[-1] == "(3 more; --top 13 lists them all)"
    assert cli("list", SPATIAL_TF_COMPILE_CACHE=str(folder)).stdout == done.stdout


def test_cache_list_sorts_by_size_and_shows_the_top_few(folder):
    os.utime(folder / f"{compile_cache.key('cpu')}.bin", (0, 0))  # used long ago
    done = cli("list", "--sort", "size", "--top", "2", SPATIAL_TF_COMPILE_CACHE=str(folder),
               SPATIAL_TF_COMPILE_CACHE_LIMIT="500MB")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "13 compile results, 98.0 KiB of a 476.8 MiB limit " \
                       "(SPATIAL_TF_COMPILE_CACHE_LIMIT)"
    assert lines[3] == "Largest:"
    assert [line.split()[2] for line in lines[6:8]] == ["20.0", "12.0"]
    assert lines[8:] == ["(11 more; --top 13 lists them all)"]


def test_cache_clear_removes_them_and_says_how_many_and_how_much(folder):
    done = cli("clear", SPATIAL_TF_COMPILE_CACHE=str(folder))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Removed 13 compile results (98.0 KiB) from {folder}.\n"
    assert list(folder.iterdir()) == []
    again = cli(SPATIAL_TF_COMPILE_CACHE=str(folder), SPATIAL_TF_COMPILE_CACHE_LIMIT="0")
    assert again.stdout == (f"Compile cache: {folder}\n0 compile results, 0 B (no limit: "
                            f"SPATIAL_TF_COMPILE_CACHE_LIMIT=0)\n")


def test_a_cache_that_is_off_or_not_made_yet(tmp_path):
    off = cli(SPATIAL_TF_COMPILE_CACHE="off")
    assert off.returncode == 0
    assert off.stdout == "Compile cache: off (SPATIAL_TF_COMPILE_CACHE=off); nothing is stored.\n"
    assert cli("clear", SPATIAL_TF_COMPILE_CACHE="off").returncode == 0
    new = cli(SPATIAL_TF_COMPILE_CACHE=str(tmp_path / "new"))
    assert new.returncode == 0
    assert new.stdout.splitlines()[0] == f"Compile cache: {tmp_path / 'new'} (not made yet)"


@pytest.mark.parametrize("argv, env, message", [
    (["bogus"], {}, "argument action: invalid choice: 'bogus' (choose from 'list', 'clear') "
                    f"(see {PROG} --help)"),
    (["--top", "0"], {}, f"argument --top: 0 is not allowed; expected an integer >= 1 "
                         f"(see {PROG} --help)"),
    ([], {"SPATIAL_TF_COMPILE_CACHE_LIMIT": "lots"},
     "SPATIAL_TF_COMPILE_CACHE_LIMIT is 'lots'; expected a size such as 2GiB or 500MB, "
     "bytes, or off for no limit. Fix: e.g. SPATIAL_TF_COMPILE_CACHE_LIMIT=2GiB, or unset "
     "it for the default 4 GiB."),
])
def test_usage_errors_are_one_line_with_status_2(tmp_path, argv, env, message):
    done = cli(*argv, SPATIAL_TF_COMPILE_CACHE=str(tmp_path), **env)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"{PROG}: error: {message}\n"


def test_cache_imports_no_tensorflow(folder):
    check = ("import sys\n"
             "from spatial_tf.__main__ import main\n"
             "status = main(['cache']) + main(['cache', 'clear'])\n"
             "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
             "{'tensorflow', 'jax', 'jaxlib', 'keras', 'numpy'})\n"
             "print(status, heavy)\n")
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO,
                               compile_cache.ENV: str(folder)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []"
    assert list(folder.iterdir()) == []


def test_the_help_is_plain_and_short():
    done = cli("--help")
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) < 40
    assert "``" not in done.stdout
    for words in ("SPATIAL_TF_COMPILE_CACHE_LIMIT", "least recently used",
                  "python -m spatial_tf cache clear"):
        assert words in " ".join(done.stdout.split())
