"""The TPU compiler's worker: ``python -m spatial_tf.emulator.tpu._xla_tpu FOLDER``.

It compiles one program with libtpu's XLA:TPU compiler for compile-only TPU devices (no
TPU needed) and writes what the compiler said to ``FOLDER/result.json``. The program
(``program.pb``, a serialized ``HloModuleProto`` already prepared by ``tpu_compile``) and
the request (``request.json``: topology, cores, sharding propagation flags) are read from
the same folder. It runs in a process of its own (``tpu_compile`` starts it) because
libtpu's compile-only client aborts the interpreter at exit, the TPU platform must be set
up before jax first starts a backend, and a compile that runs too long must be stoppable;
the process ends with ``os._exit`` once the result is written. Verified with jax/jaxlib
0.10.2 and libtpu 0.0.42.1.

``python -m spatial_tf.emulator.tpu._xla_tpu FOLDER PARENT_PID`` (how ``tpu_compile``
starts it) also ties the worker to its parent (``follow_parent``): it ends when that
process ends, however it ends (an interrupt, SIGTERM, SIGKILL), and removes ``FOLDER``
first, so a ``plan`` that is killed leaves no compiler running (several GB) and no
folder behind. On Linux the kernel sends it SIGTERM when the parent dies
(``PR_SET_PDEATHSIG``); everywhere, a thread checks the parent every half second.

``SPATIAL_TF_WORKER_TEST_SLEEP=SECONDS`` is a test hook, never set otherwise: the worker
waits that long before it compiles, so that the tests of its lifetime
(``tests/emulator/tpu/test_worker_lifetime.py``) can kill its parent meanwhile
without loading libtpu.
"""
import importlib
import json
import os
import select
import shutil
import signal
import sys
import threading
import time

__all__ = ["main", "compile_request", "follow_parent", "TEST_SLEEP_ENV"]

TEST_SLEEP_ENV = "SPATIAL_TF_WORKER_TEST_SLEEP"
PARENT_POLL_SECONDS = 0.5

# set before jax loads: compile-only, no TPU metadata server to ask
ENVIRONMENT = {"JAX_PLATFORMS": "cpu", "TPU_SKIP_MDS_QUERY": "1", "TF_CPP_MIN_LOG_LEVEL": "3",
               # several compiles at once (planner threads, pytest workers): without it
               # libtpu takes a lock file per machine and a second process fails
               "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}


def compile_request(request, hlo):
    """What the TPU compiler says of ``hlo`` for ``request``, as a JSON-able dict with
    ``status``: ``compiled`` (``memory``, ``cost``, ``hlo_text``), ``out_of_memory`` or
    ``failed`` (``message``: the compiler's own words); ``error`` when the compiler could
    not be set up (``main``)."""
    from spatial_tf.emulator.xla import _xla

    j = _xla._load()
    xc = j.xla_client
    topologies = importlib.import_module("jax.experimental.topologies")
    mlir = importlib.import_module("jax._src.interpreters.mlir")
    ir = importlib.import_module("jax._src.lib.mlir").ir
    n, replicas = int(request["num_partitions"]), int(request.get("num_replicas", 1))
    chip = {"chip_config_name": request["chip_config"]} if request.get("chip_config") else {}
    every = topologies.get_topology_desc(
        platform="tpu", topology_name=request["topology"], **chip).devices
    devices = every[:n * replicas]
    options = _xla.compile_options(n, replicas, request["free_in"], request["propagate_out"])
    for name, value in request.get("build_options", {}).items():  # e.g. effort levels
        setattr(options.executable_build_options, name, value)
    start = time.perf_counter()
    with mlir.make_ir_context():
        module = ir.Module.parse(xc._xla.mlir.hlo_to_stablehlo(hlo))
        try:
            executable = devices[0].client.compile(
                module, executable_devices=xc._xla.DeviceList(tuple(devices)),
                compile_options=options)
        except Exception as e:  # the compiler's verdict: out of memory, or a refusal
            message = str(e).strip()
            status = "out_of_memory" if "RESOURCE_EXHAUSTED" in message else "failed"
            return {"status": status, "message": message, "device_kind": devices[0].device_kind,
                    "topology_devices": len(every), "seconds": time.perf_counter() - start}
    seconds = time.perf_counter() - start
    stats = executable.get_compiled_memory_stats()
    return {
        "status": "compiled",
        "device_kind": devices[0].device_kind,
        "topology_devices": len(every),
        "seconds": seconds,
        "memory": {"argument": int(stats.argument_size_in_bytes),
                   "output": int(stats.output_size_in_bytes),
                   "alias": int(stats.alias_size_in_bytes),
                   "temp": int(stats.temp_size_in_bytes),
                   "code": int(stats.generated_code_size_in_bytes)},
        "cost": _plain_cost(executable.cost_analysis()),
        "hlo_text": executable.hlo_modules()[0].to_string(),
    }


def _plain_cost(cost):
    if isinstance(cost, (list, tuple)):  # one dict per program in some jaxlib versions
        cost = cost[0] if cost else {}
    return {k: float(v) for k, v in dict(cost or {}).items() if "{" not in k}


def main(folder):
    with open(os.path.join(folder, "request.json")) as f:
        request = json.load(f)
    with open(os.path.join(folder, "program.pb"), "rb") as f:
        hlo = f.read()
    pause = os.environ.get(TEST_SLEEP_ENV)
    if pause:  # the test hook (see the module's docstring)
        time.sleep(float(pause))
    try:
        result = compile_request(request, hlo)
    except Exception as e:  # set-up failed (topology, versions): reported, not raised
        result = {"status": "error", "message": f"{type(e).__name__}: {e}", "seconds": 0.0}
    partial = os.path.join(folder, "result.json.partial")
    with open(partial, "w") as f:
        json.dump(result, f)
    os.replace(partial, os.path.join(folder, "result.json"))


def follow_parent(parent: int, folder: str) -> None:
    """End this process, after removing ``folder``, when process ``parent`` ends or
    SIGTERM arrives.

    Both are handled in a thread of their own: the main thread spends minutes inside the
    compiler (C++), where Python runs no signal handler until the compile returns. The
    SIGTERM handler itself does nothing; the signal reaches the thread through
    ``signal.set_wakeup_fd``, which the interpreter writes at once. On Linux,
    ``PR_SET_PDEATHSIG`` has the kernel send SIGTERM when the parent dies, even by
    SIGKILL; the thread's check of the parent (``os.getppid()``) covers a parent that
    died before that was set, and systems without ``prctl``. Call it from the main
    thread, before the compile.
    """
    wake, wakeup = os.pipe()
    os.set_blocking(wakeup, False)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    signal.siginterrupt(signal.SIGTERM, False)  # the compiler's system calls go on
    signal.set_wakeup_fd(wakeup, warn_on_full_buffer=False)

    direct = os.getppid() == parent  # else started through a wrapper, or parent gone

    def watch():
        while _alive(parent, direct):
            if select.select([wake], [], [], PARENT_POLL_SECONDS)[0]:
                break  # SIGTERM
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(128 + signal.SIGTERM)  # os._exit: libtpu aborts a normal exit

    _parent_death_signal(signal.SIGTERM)
    # first check right away: the parent may have died before the kernel was asked
    threading.Thread(target=watch, name="follow_parent", daemon=True).start()


def _alive(parent: int, direct: bool) -> bool:
    """Whether process ``parent`` still runs: this process's parent is still it (an
    orphan is adopted by another), or, when it was not the direct parent, it exists."""
    if direct:
        return os.getppid() == parent
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by another user
        return True
    return True


def _parent_death_signal(signum) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent dies (False where
    ``prctl`` is not available: the watching thread alone then notices)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(signum), 0, 0, 0) == 0  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


if __name__ == "__main__":
    for _key, _value in ENVIRONMENT.items():
        os.environ[_key] = _value
    if len(sys.argv) > 2:  # started by tpu_compile, which passes its process id
        follow_parent(int(sys.argv[2]), sys.argv[1])
    main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # libtpu's compile-only client aborts a normal interpreter exit
