"""The TPU compiler's worker ends with the process that started it, however that process
ends, and leaves no folder behind.

Real processes: a parent Python process runs ``tpu_compile._run_worker`` (the path every
TPU compile takes), which starts the real worker; the worker waits instead of compiling
(the ``SPATIAL_TF_WORKER_TEST_SLEEP`` test hook of ``_xla_tpu``), and the test kills the
parent. With SIGINT and SIGTERM the parent itself must stop the worker, so there the
worker is not told its parent's pid and does not watch it; with SIGKILL the parent can
do nothing, and the worker must notice and end by itself.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from spatial_tf.emulator.tpu import _xla_tpu

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

pytestmark = [
    pytest.mark.slow,  # each parent imports TensorFlow (tpu_compile's protos)
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and process groups"),
]

# the parent: reports the worker's pid and folder as the library starts it, then waits
PARENT = """
import json, signal, subprocess, sys
from spatial_tf.emulator.tpu import tpu_compile

# as on the command line, whatever the test runner's own signal handling
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

follows = sys.argv[1] == "follows"

class Reported(subprocess.Popen):
    def __init__(self, command, **kwargs):
        if not follows:  # no parent pid: the worker does not watch this process
            command = command[:4]
        super().__init__(command, **kwargs)
        print(json.dumps({"pid": self.pid, "folder": command[3]}), flush=True)

subprocess.Popen = Reported
request = {"topology": "v5e:1x1", "num_partitions": 1, "free_in": [],
           "propagate_out": False}
tpu_compile._run_worker(b"", request, "step", tpu_compile.tpu_target("v5e"), None, False)
print("the worker ended on its own", flush=True)
"""


def _running(pid):
    """Whether process ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc: os.kill said it exists


def _start(tmp_path, follows):
    env = {**os.environ, _xla_tpu.TEST_SLEEP_ENV: "300", "PYTHONPATH": REPO,
           "TMPDIR": str(tmp_path)}  # the worker's folder lands here
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "follows" if follows else "alone"],
                              env=env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([parent.stdout], [], [], 180)
    if not ready:
        parent.kill()
        pytest.fail(f"the parent did not start a worker in 180 s: {parent.communicate()[1]}")
    line = parent.stdout.readline()
    if not line:
        pytest.fail(f"the parent ended before starting a worker: {parent.communicate()[1]}")
    worker = json.loads(line)
    assert _running(worker["pid"]) and os.path.isdir(worker["folder"])
    return parent, worker["pid"], worker["folder"]


def _wait_until_gone(pid, folder, seconds=10.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end and (_running(pid) or os.path.exists(folder)):
        time.sleep(0.1)
    still = [what for what, there in (("the worker", _running(pid)),
                                      ("its folder", os.path.exists(folder))) if there]
    if _running(pid):
        os.kill(pid, signal.SIGKILL)  # leave nothing running after a failure
    return still


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, -signal.SIGINT),
                                            (signal.SIGTERM, -signal.SIGTERM)])
def test_a_parent_stopped_by_a_signal_stops_its_worker_and_removes_the_folder(
        tmp_path, signum, status):
    parent, pid, folder = _start(tmp_path, follows=False)
    time.sleep(0.5)  # the parent is in its wait loop
    parent.send_signal(signum)
    still = _wait_until_gone(pid, folder)
    out, err = parent.communicate(timeout=30)
    assert not still, f"{' and '.join(still)} still there 10 s after the parent's " \
                      f"{signal.Signals(signum).name}"
    assert "the worker ended on its own" not in out
    # SIGTERM: the parent ends by the signal, as it would have without a worker
    assert parent.returncode == status, err[-2000:]


def test_a_worker_whose_parent_is_killed_ends_and_removes_its_folder(tmp_path):
    parent, pid, folder = _start(tmp_path, follows=True)
    time.sleep(0.5)  # the worker is watching its parent
    parent.kill()  # SIGKILL: no cleanup in the parent at all
    parent.communicate(timeout=30)
    still = _wait_until_gone(pid, folder)
    assert not still, f"{' and '.join(still)} still there 10 s after the parent was killed"
    assert not [name for name in os.listdir(tmp_path) if name.startswith("spatial_tf_tpu_")]


def _worker(tmp_path, parent):
    """The worker started directly, watching process ``parent``, in a folder of its own."""
    folder = tmp_path / "spatial_tf_tpu_direct"
    folder.mkdir()
    (folder / "program.pb").write_bytes(b"")
    (folder / "request.json").write_text(json.dumps(
        {"topology": "v5e:1x1", "num_partitions": 1, "free_in": [], "propagate_out": False}))
    env = {**os.environ, **_xla_tpu.ENVIRONMENT, _xla_tpu.TEST_SLEEP_ENV: "300",
           "PYTHONPATH": REPO}
    worker = subprocess.Popen([sys.executable, "-m", "spatial_tf.emulator.tpu._xla_tpu",
                               str(folder), str(parent)], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(3)  # started, and watching (it imports no TensorFlow)
    assert worker.poll() is None, worker.communicate()[1].decode()[-2000:]
    return worker, str(folder)


def test_a_worker_told_to_stop_removes_its_folder(tmp_path):
    """SIGTERM, as Linux's parent-death signal sends it: the worker removes its folder
    and ends, though its main thread is busy (here asleep; in the compiler, in C++)."""
    worker, folder = _worker(tmp_path, os.getpid())
    worker.send_signal(signal.SIGTERM)
    try:
        status = worker.wait(timeout=5)
    except subprocess.TimeoutExpired:
        worker.kill()
        pytest.fail("the worker still runs 5 s after SIGTERM")
    assert not os.path.exists(folder)
    assert status == 128 + signal.SIGTERM  # its own exit, not SIGTERM's default action


def test_a_worker_notices_its_parent_is_gone_without_a_signal(tmp_path):
    """The watching thread alone (no parent-death signal: the process watched is not
    the worker's parent), as on systems without prctl."""
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    worker, folder = _worker(tmp_path, watched.pid)
    watched.kill()
    watched.wait()  # reaped: its pid no longer exists
    try:
        worker.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        pytest.fail("the worker still runs 10 s after the process it watched ended")
    assert not os.path.exists(folder)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_the_worker_asks_linux_for_a_signal_when_its_parent_dies():
    check = ("import ctypes, signal\n"
             "from spatial_tf.emulator.tpu import _xla_tpu\n"
             "assert _xla_tpu._parent_death_signal(signal.SIGTERM)\n"
             "value = ctypes.c_int()\n"
             "ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG\n"
             "print(value.value)\n")
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == signal.SIGTERM


def test_the_worker_imports_the_spatial_tf_its_parent_runs(tmp_path, monkeypatch):
    # a decoy spatial_tf earlier on PYTHONPATH (another clone, an older install) must not
    # be the one the worker runs: the parent's own comes first
    from spatial_tf.emulator.tpu import tpu_compile

    decoy = tmp_path / "decoy" / "spatial_tf"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(decoy.parent))
    path = tpu_compile.worker_path()
    assert path.split(os.pathsep)[1:] == [str(decoy.parent)]
    done = subprocess.run([sys.executable, "-c", "import spatial_tf; print(spatial_tf.__file__)"],
                          env={**os.environ, "PYTHONPATH": path}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    import spatial_tf

    assert done.stdout.strip() == spatial_tf.__file__, done.stderr


def test_the_worker_path_keeps_the_rest_of_pythonpath_once(monkeypatch):
    from spatial_tf.emulator.tpu import tpu_compile

    monkeypatch.delenv("PYTHONPATH", raising=False)
    root = tpu_compile.worker_path()
    assert os.pathsep not in root and os.path.isdir(os.path.join(root, "spatial_tf"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/a", root, "", "/b"]))
    assert tpu_compile.worker_path().split(os.pathsep) == [root, "/a", "/b"]
