"""A traced step compiled by XLA's TPU compiler for a named TPU generation, no TPU needed.

libtpu (``pip install "spatial-tf[tpu-compile]"``) ships XLA:TPU with compile-only TPU
devices of every generation it knows (``tpu_generations``). ``compile_for_tpu``
hands it the same program the emulator compiles for CPU and returns what the TPU
compiler says: per-core memory by kind as it assigns buffers, its HBM verdict (a
program that does not fit is refused with ``RESOURCE_EXHAUSTED``, in seconds) and its
cost analysis. Nothing runs: the emulator still executes on CPU.

Each compile runs in a worker process (``_xla_tpu``) with an optional time limit, prints
a progress line while it runs, and its result is cached across processes
(``compile_cache``); ``SPATIAL_TF_TPU_COMPILER_LOG=FILE`` appends each compile's own log
to ``FILE``. Two parts of a TensorFlow program that the TPU pipeline refuses are
handled here, once: ``copy`` instructions (TensorFlow's results and variable writes; the
TPU pipeline cannot legalize ``mhlo.copy``) are removed, since a copy is the identity
and XLA inserts the copies it needs itself; float64, which a TPU lacks, is refused with
a message before anything runs.

>>> tpu_target("v5litepod-8")
TpuTarget('v5e-8')
>>> tpu_target("v9")  # doctest: +ELLIPSIS
Traceback (most recent call last):
ValueError: unknown TPU generation 'v9'; expected one of v2, v3, v4, v5e, v5p, v6e, tpu7x ...
"""
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import NamedTuple, Optional, Sequence

from spatial_tf import table
from spatial_tf._tf_internals import hlo_pb2, xla_data_pb2
from spatial_tf.emulator.tpu import buffers, compile_times
from spatial_tf.emulator.xla import compile_cache
from spatial_tf.emulator.xla.errors import CompileError
from spatial_tf.emulator.xla.executable import with_peak
from spatial_tf.error import Error
from spatial_tf.tpu_generations import Generation, parse

__all__ = ["TpuTarget", "tpu_target", "check_target", "TpuProgram", "compile_for_tpu",
           "Propagation", "Waiting",
           "libtpu_version", "compiler_name", "TpuCompilerUnavailable", "TpuCompileTimeout",
           "strip_copies", "INSTALL_HINT"]

INSTALL_HINT = 'pip install "spatial-tf[tpu-compile]"'
# XLA ExecutableBuildOptions fields for TPU compiles, as JSON (e.g. '{"exec_time_
# optimization_effort": -1.0}'); part of each answer's cache key
BUILD_OPTIONS_ENV = "SPATIAL_TF_TPU_BUILD_OPTIONS"
# a compile that only answers "does it fit, in how much memory" (fit_only=True): XLA's
# lowest memory-fitting effort. The lowest execution-time effort compiles 4-8x faster but
# changes memory (a published 3D U-Net: 15.2 GiB against the default's 17.2; 13.4
# against 14.1), so it is not used (docs/guide-planning.md, "What the compile time buys")
FIT_ONLY_OPTIONS = {"memory_fitting_effort": -1.0}
# a file that receives each TPU compile's log (libtpu's own lines: set TPU_MIN_LOG_LEVEL=0
# TPU_STDERR_LOG_LEVEL=0 for them all), appended; for finding where compile time goes
LOG_ENV = "SPATIAL_TF_TPU_COMPILER_LOG"
SOURCE = "the TPU compiler (XLA:TPU in libtpu, compile-only)"


class TpuCompilerUnavailable(Error, ImportError):
    """libtpu is not installed, or not the version the installed jax was built for."""


class TpuCompileTimeout(Error, TimeoutError):
    """The TPU compiler did not finish within the time limit; nothing was cached."""


@dataclasses.dataclass(frozen=True)
class TpuTarget:
    """A TPU generation, or a named slice of one, to compile for.

    Attributes:
      generation: the ``Generation`` record.
      slice_suffix: the number of a slice name (``8`` of ``"v4-8"``), or None.
    """

    generation: Generation
    slice_suffix: Optional[int] = None

    @property
    def slice_cores(self) -> Optional[int]:
        """The devices TensorFlow sees in the named slice (``v4-8``: 4, one per chip)."""
        if self.slice_suffix is None:
            return None
        return self.generation.devices_in_slice(self.slice_suffix)

    @property
    def name(self) -> str:
        return self.generation.name + (f"-{self.slice_suffix}" if self.slice_suffix else "")

    def __repr__(self):
        return f"TpuTarget({self.name!r})"


def tpu_target(value) -> TpuTarget:
    """``value`` (``"v3"``, ``"v4-8"``, ``"v5litepod"``, a ``TpuTarget``) as a target.

    Raises:
      ValueError: an unknown generation (the message lists the known ones).
    """
    if isinstance(value, TpuTarget):
        return value
    if not isinstance(value, str):
        raise TypeError(f"target is {value!r}; expected a TPU generation or slice name such "
                        f"as 'v3' or 'v5e-8'. Fix: target='v3'.")
    record, piece = parse(value)
    return TpuTarget(record, piece.suffix if piece else None)


def libtpu_version() -> Optional[str]:
    """The installed libtpu's version, or None."""
    try:
        return importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        return None


def compiler_name(target: "TpuTarget") -> str:
    """How figures from the TPU compiler are labelled in tables:
    ``"the TPU compiler for v3 (XLA:TPU, libtpu 0.0.42.1)"``."""
    return f"the TPU compiler for {target.name} (XLA:TPU, libtpu {libtpu_version()})"


def _libtpu_wanted() -> Optional[str]:
    """The libtpu version the installed jax asks for (its ``tpu`` extra), e.g. '0.0.42.*'."""
    try:
        requires = importlib.metadata.requires("jax") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in requires:
        match = re.match(r"^libtpu\s*==\s*([\w.*]+)", line)
        if match and "tpu" in line.split(";", 1)[-1]:
            return match.group(1)
    return None


def check_target(name: str, target, num_partitions: int, num_replicas: int = 1):
    """``target`` as a ``TpuTarget`` and the libtpu version, after the checks every TPU
    compile needs: libtpu installed and matching jax (``check_compiler``), and the
    replicas' cores within the named slice.

    Raises:
      TpuCompilerUnavailable, ValueError: naming ``name``, the target and the fix.
    """
    target = tpu_target(target)
    version = check_compiler(name, target)
    if target.slice_cores and num_partitions * num_replicas > target.slice_cores:
        raise ValueError(
            f"{name}: {table.plural(num_replicas, 'replica')} of "
            f"{table.plural(num_partitions, 'core')} {'does' if num_replicas == 1 else 'do'} "
            f"not fit TPU {target.name}, which has {target.slice_cores} cores. Fix: a larger "
            f"slice, e.g. target='{target.generation.name}', or fewer cores per replica.")
    return target, version


def check_compiler(name: str, target: TpuTarget) -> str:
    """The libtpu version, or ``TpuCompilerUnavailable`` naming the step, target and fix."""
    version = libtpu_version()
    where = f"{name}: compiling for TPU {target.name}"
    if version is None:
        raise TpuCompilerUnavailable(
            f"{where} needs libtpu (XLA's TPU compiler), which is not installed. Fix: "
            f"{INSTALL_HINT} (libtpu is under the Google Cloud Platform Terms of Service), "
            f"or leave the target out for XLA:CPU's figures.")
    wanted = _libtpu_wanted()
    if wanted and not re.fullmatch(wanted.replace(".", r"\.").replace("*", ".*"), version):
        raise TpuCompilerUnavailable(
            f"{where}: libtpu {version} is installed but the installed jax was built for "
            f"libtpu {wanted}. Fix: {INSTALL_HINT}, which installs the matching pair.")
    return version


@dataclasses.dataclass(frozen=True)
class TpuProgram:
    """What the TPU compiler said of one program.

    Attributes:
      target: the ``TpuTarget``; ``device_kind``: the compiler's device (``"TPU v3"``).
      num_partitions: cores per replica it was partitioned for.
      fits: the compiler accepted the program within the device's HBM.
      memory: per-core bytes by kind (``argument``, ``output``, ``alias``, ``temp``,
        ``peak``) as the TPU compiler assigned them; None when it does not fit.
      required_bytes, available_bytes: from an out-of-memory verdict (None otherwise).
      message: the compiler's own words when it does not fit.
      cost: its cost analysis (``flops``, ``bytes accessed``, ``optimal_seconds``).
      compile_seconds: the compiler's time (when it ran; the cached figure otherwise).
      cached: read from the compile cache rather than compiled now.
      libtpu: the compiler's version.
      topology_devices: the devices of the compile-only topology compiled for (as
        TensorFlow sees them: a v4 chip is one device).
    """

    target: TpuTarget
    device_kind: str
    num_partitions: int
    fits: bool
    memory: Optional[dict]
    required_bytes: Optional[int]
    available_bytes: Optional[int]
    message: str
    cost: dict
    compile_seconds: float
    cached: bool
    libtpu: str
    hlo_text: str = dataclasses.field(default="", repr=False)
    topology_devices: Optional[int] = None  # devices of the compile-only topology
    fit_only: bool = False  # compiled for the verdict and memory only (FIT_ONLY_OPTIONS)

    @property
    def source(self) -> str:
        return f"XLA:TPU {self.target.generation.name} (libtpu {self.libtpu}, compile-only)"

    def verdict(self) -> str:
        """One line: fits with its peak, or the compiler's out-of-memory figures."""
        if self.memory is not None:
            return (f"fits one {self.device_kind} core: peak "
                    f"{table.format_bytes(self.memory['peak'])} per core")
        need = table.format_bytes(self.required_bytes) if self.required_bytes else "?"
        have = table.format_bytes(self.available_bytes) if self.available_bytes else "?"
        return f"does not fit a {self.device_kind} core: needs {need}, {have} available"


_OOM = re.compile(r"\(([\d.]+)([KMGT])\)")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def out_of_memory_bytes(message: str):
    """``(required, available)`` bytes from XLA:TPU's out-of-memory message (or None).

    >>> out_of_memory_bytes("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total "
    ...     "memory required for HLO temporaries (17.22G) exceeds available HBM (15.48G).")
    (18489834209, 16621523436)
    """
    found = [round(float(v) * _UNITS[u]) for v, u in _OOM.findall(message)]
    return (found[0], found[1]) if len(found) >= 2 else (None, None)


def strip_copies(hlo: bytes) -> bytes:
    """Serialized ``hlo`` with every ``copy`` instruction removed (its users read its
    operand): the TPU pipeline refuses the ``mhlo.copy`` a TensorFlow program's results
    carry, and XLA's copy insertion adds back the copies the program needs."""
    module = hlo_pb2.HloModuleProto.FromString(hlo)
    for computation in module.computations:
        source = {i.id: i.operand_ids[0] for i in computation.instructions
                  if i.opcode == "copy"}
        if not source:
            continue

        def through(i):
            while i in source:
                i = source[i]
            return i

        kept = [i for i in computation.instructions if i.opcode != "copy"]
        for instruction in kept:
            instruction.operand_ids[:] = [through(o) for o in instruction.operand_ids]
        computation.root_id = through(computation.root_id)
        del computation.instructions[:]
        computation.instructions.extend(kept)
    return module.SerializeToString()


def has_float64(hlo: bytes) -> bool:
    """Whether any value of the program is float64 (a TPU has no float64).

    A float64 scalar constant whose every use converts it to another type is not counted:
    TensorFlow's lowering of a bilinear resize (``tf.image.resize``, Keras' ``Resizing``)
    and of its gradient writes its 0.5 pixel offset that way in float32 models, and XLA
    folds the conversion into a float32 constant.
    """
    module = hlo_pb2.HloModuleProto.FromString(hlo)
    users: dict = {}
    for computation in module.computations:
        for instruction in computation.instructions:
            for operand in instruction.operand_ids:
                users.setdefault(operand, []).append(instruction)

    def f64(shape):
        return shape.element_type == xla_data_pb2.F64 or any(f64(s) for s in shape.tuple_shapes)

    def folded(i):  # a float64 scalar constant only ever converted to another type
        uses = users.get(i.id, [])
        return (i.opcode == "constant" and not i.shape.dimensions and uses
                and all(u.opcode == "convert" and not f64(u.shape) for u in uses))

    return any(f64(i.shape) and not folded(i)
               for c in module.computations for i in c.instructions)


class Propagation(NamedTuple):
    """Which parameters (``free_in``) and whether the results (``propagate_out``) take
    the shardings XLA propagates (``_xla.propagation`` finds them)."""

    free_in: Sequence[bool] = ()
    propagate_out: bool = False


class Waiting(NamedTuple):
    """How a TPU compile is waited for: ``timeout`` seconds before it is stopped (None:
    no limit); ``progress``: a line on stderr while it runs (None: a ticking line when
    stderr is a terminal, otherwise one line when it starts)."""

    timeout: Optional[float] = None
    progress: Optional[bool] = None


def compile_for_tpu(hlo: bytes, num_partitions: int, target, *, name: str = "step",
                    num_replicas: int = 1, propagation: Propagation = Propagation(),
                    waiting: Waiting = Waiting(), fit_only: bool = False) -> TpuProgram:
    """Compile serialized ``hlo`` for ``num_partitions`` cores of ``target`` with the TPU
    compiler (once per program, target and libtpu version: later calls read the cache),
    for ``num_replicas`` replicas (a program with cross-replica sums needs them all;
    memory figures are per core either way).

    ``propagation``: the shardings XLA may choose (``Propagation``); ``waiting``: the
    time limit and progress line (``Waiting``).
    ``fit_only``: compile at XLA's lowest memory-fitting effort (``FIT_ONLY_OPTIONS``),
    for the verdict and memory only (the program has no step time).

    Raises:
      TpuCompilerUnavailable: no libtpu, or one that does not match jax.
      ValueError: float64 in the program, or more cores than the slice holds.
      CompileError: the TPU compiler refused the program (its message, first line).
      TpuCompileTimeout: the compile ran past ``waiting.timeout``.
    """
    target, version = check_target(name, target, num_partitions, num_replicas)
    if has_float64(hlo):
        raise ValueError(
            f"{name}: the step computes in float64, which a TPU does not have, so it cannot "
            f"be compiled for TPU {target.name}. Fix: compile float64 steps (parity checks) "
            f"for the CPU emulator only, with no target; give the TPU target a float32 or "
            f"bfloat16 step.")
    program = strip_copies(hlo)
    request = _request(target, num_partitions, num_replicas, *propagation, fit_only)
    # libtpu's flags (LIBTPU_INIT_ARGS) change what it compiles: part of the answer's key
    # op names left out of the key: the same program traced with other Keras layer
    # numbers (a notebook and a guide) shares the answer, its op names put back
    entry = compile_cache.program_key(program, "tpu", json.dumps(request, sort_keys=True),
                                      version, os.environ.get("LIBTPU_INIT_ARGS", ""),
                                      metadata=False)
    names = compile_cache.op_names(program)
    # a dump (buffers.DUMP_ENV) needs the compiler to run: the cached answer is not read
    result = None if os.environ.get(buffers.DUMP_ENV) else _load_renamed(entry, names)
    cached = result is not None
    if result is None:
        result = _compile_and_record(program, request, name, target, *waiting)
        if result["status"] in ("compiled", "out_of_memory"):
            compile_cache.store(entry, {**result, "op_names": names})
    if result["status"] == "error":
        raise RuntimeError(
            f"{name}: XLA's TPU compiler (libtpu {version}) could not be started for TPU "
            f"{target.name}: {result['message']}. Fix: {INSTALL_HINT} to reinstall the "
            f"jax and libtpu pair spatial_tf was verified with.")
    if result["status"] == "failed":
        first = result["message"].splitlines()[0] if result["message"] else "(no message)"
        raise CompileError(
            f"{name}: the TPU compiler refused the step for TPU {target.name} "
            f"({table.plural(num_partitions, 'core')}): {first}. Fix: the same step would fail "
            f"on that TPU; its metadata op_name names the TensorFlow op (the compiler's full "
            f"message follows).\n{result['message']}", function=name)
    return _program(result, target, num_partitions, version, cached, fit_only)


def worker_path() -> str:
    """``PYTHONPATH`` for the worker: the folder this spatial_tf was imported from first,
    so that the worker runs the same code as its parent (a notebook in a clone imports
    the clone's, whatever the environment has installed).

    >>> worker_path().split(os.pathsep)[0] == os.path.dirname(os.path.dirname(
    ...     os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    True
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return os.pathsep.join([root, *rest])


def _load_renamed(entry, names):
    """The stored answer for ``entry`` with its op names made this program's, or None."""
    result = compile_cache.load(entry)
    if result is None:
        return None
    stored = result.pop("op_names", names)
    for field in ("hlo_text", "message"):
        if isinstance(result.get(field), str):
            result[field] = compile_cache.renamed(result[field], stored, names)
    return result


def _request(target, num_partitions, num_replicas, free_in, propagate_out, fit_only):
    """What the worker compiles for: topology, cores, propagation, chip configuration and
    XLA build options (all part of the answer's cache key)."""
    request = {"topology": target.generation.topology_for(num_partitions * num_replicas),
               "num_partitions": int(num_partitions), "num_replicas": int(num_replicas),
               "free_in": [bool(f) for f in free_in], "propagate_out": bool(propagate_out)}
    if target.generation.chip_config:  # megacore: TensorFlow's devices, not TensorCores
        request["chip_config"] = target.generation.chip_config
    build = dict(FIT_ONLY_OPTIONS) if fit_only else {}
    build.update(json.loads(os.environ.get(BUILD_OPTIONS_ENV) or "{}"))
    if build:  # XLA's ExecutableBuildOptions for the TPU compile
        request["build_options"] = build
    return request


def _program(result, target, num_partitions, version, cached, fit_only):
    fits = result["status"] == "compiled"
    memory = None
    required = available = None
    if fits:
        memory = with_peak(result["memory"])
    else:
        required, available = out_of_memory_bytes(result["message"])
    return TpuProgram(target, result.get("device_kind", f"TPU {target.generation.name}"),
                      num_partitions, fits, memory, required, available,
                      "" if fits else result["message"].splitlines()[0], result.get("cost", {}),
                      result["seconds"], cached, version, result.get("hlo_text", ""),
                      result.get("topology_devices"), bool(fit_only))


def _compile_and_record(program, request, name, target, timeout, progress):
    """``_run_worker``'s answer; its wall time is recorded (``compile_times``) and the
    progress line says how long similar compiles took before."""
    generation, cores = target.generation.name, request["num_partitions"]
    expected = compile_times.expected(generation, cores, len(program))
    start = time.perf_counter()
    result = _run_worker(program, request, name, target, timeout, progress,
                         compile_times.expected_text(expected), _dump_flags(name, cores))
    if result["status"] in ("compiled", "out_of_memory"):
        compile_times.record(generation, cores, len(program), result["status"] == "compiled",
                             time.perf_counter() - start)
    return result


def _dump_flags(name, cores) -> dict:
    """The worker's ``XLA_FLAGS`` with XLA's dump into a new folder
    ``<name>-<cores>cores-<random>`` under ``$SPATIAL_TF_TPU_COMPILER_DUMP``
    (``buffers``), or nothing when that is not set."""
    root = os.environ.get(buffers.DUMP_ENV)
    if not root:
        return {}
    os.makedirs(root, exist_ok=True)
    label = re.sub(r"[^\w.]+", "_", name)
    folder = tempfile.mkdtemp(prefix=f"{label}-{cores}cores-", dir=os.path.abspath(root))
    flags = os.environ.get("XLA_FLAGS", "")
    return {"XLA_FLAGS": f"{flags} --xla_dump_to={folder} --xla_dump_hlo_as_text".strip()}


def _run_worker(program, request, name, target, timeout, progress, note="", extra_env=None):
    """What the worker process said of ``program``. The worker and its folder are gone
    when this returns or raises (SIGTERM included, ``_sigterm_stops_the_worker``); a
    worker whose parent is killed ends by itself and removes the folder
    (``_xla_tpu.follow_parent``), so the folder's removal here tolerates its absence."""
    from spatial_tf.emulator.tpu import _xla_tpu

    with _sigterm_stops_the_worker(), tempfile.TemporaryDirectory(
            prefix="spatial_tf_tpu_", ignore_cleanup_errors=True) as folder:
        with open(os.path.join(folder, "program.pb"), "wb") as f:
            f.write(program)
        with open(os.path.join(folder, "request.json"), "w") as f:
            json.dump(request, f)
        env = {**os.environ, **_xla_tpu.ENVIRONMENT, "PYTHONPATH": worker_path(),
               **(extra_env or {})}
        log = open(os.path.join(folder, "worker.log"), "w+b")
        # the worker watches this process and ends with it (and removes the folder)
        command = [sys.executable, "-m", "spatial_tf.emulator.tpu._xla_tpu", folder,
                   str(os.getpid())]
        what = (f"{name}: compiling for TPU {target.name} "
                f"({table.plural(request['num_partitions'], 'core')}) with XLA's TPU compiler")
        with log, _Progress(what, progress, note) as shown:
            # started in its own folder: a spatial_tf folder where the parent runs is
            # not imported in place of the parent's
            worker = subprocess.Popen(command, stdout=log, stderr=log, env=env, cwd=folder,
                                      start_new_session=True)
            try:
                _wait(worker, timeout, shown)
            except BaseException:
                worker.kill()
                worker.wait()
                raise
            _keep_log(log)
            path = os.path.join(folder, "result.json")
            if not os.path.exists(path):
                log.seek(0)
                lines = log.read().decode("utf-8", "replace").strip().splitlines()
                # libtpu's fatal line ("F1127 ... Check failed: ...") says why; else the end
                fatal = [line for line in lines if re.match(r"^F\d{4} ", line)]
                raise RuntimeError(
                    f"{what}: the compiler's worker process ended (exit status "
                    f"{worker.returncode}) without an answer; the TPU compiler failed on "
                    f"this program. Its words:\n  " + "\n  ".join(fatal or lines[-5:]))
        with open(path) as f:
            return json.load(f)


def _keep_log(log):
    """Append the worker's log to ``$SPATIAL_TF_TPU_COMPILER_LOG`` when that is set."""
    keep = os.environ.get(LOG_ENV)
    if not keep:
        return
    log.seek(0)
    try:
        with open(keep, "ab") as f:
            f.write(log.read())
    except OSError as e:
        print(f"warning: {LOG_ENV}={keep}: the TPU compiler's log was not kept ({e})",
              file=sys.stderr)


def _wait(worker, timeout, shown):
    start = time.perf_counter()
    while worker.poll() is None:
        elapsed = time.perf_counter() - start
        if timeout is not None and elapsed > timeout:
            raise TpuCompileTimeout(
                f"{shown.what}: not done after {timeout:g} s, stopped; nothing was cached. "
                f"Fix: a larger timeout (a program that fits one core takes minutes on a "
                f"2-core machine), or fewer voxels per core.")
        shown.tick(elapsed)
        time.sleep(0.2)


class _Terminated(BaseException):
    """SIGTERM arrived while the parent waited for the worker (not an ``Exception``: no
    ``except Exception`` on the way up may swallow it)."""


@contextlib.contextmanager
def _sigterm_stops_the_worker():
    """While the worker runs, SIGTERM stops it and removes its folder before this process
    ends by that signal, as it would have without the worker.

    Python's default SIGTERM ends the process at once, without ``finally`` blocks; here
    it raises ``_Terminated`` instead, which kills the worker on its way up, and then the
    default action is taken. Only in the main thread (the only one Python runs signal
    handlers in), and only where SIGTERM has its default action: a handler of the
    program's own, or an ignored SIGTERM, is left as it is.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL):
        yield
        return

    def stop(signum, frame):
        raise _Terminated()

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        raise  # not reached: SIGTERM's default action ends the process
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


class _Progress:
    """A line on stderr while the TPU compiler runs: on a terminal it ticks the seconds
    (``...: 35 s (about 1 min 40 s if it fits, as 2 similar compiles took here)``);
    elsewhere it is printed once when the compile starts."""

    def __init__(self, what, enabled, note=""):
        self.what = what
        self.note = f" ({note})" if note else ""
        self.terminal = sys.stderr.isatty()
        self.enabled = True if enabled is None else bool(enabled)
        self._last = -1

    def __enter__(self):
        if self.enabled and not self.terminal:
            print(f"{self.what} ...{self.note}", file=sys.stderr, flush=True)
        return self

    def tick(self, elapsed):
        if self.enabled and self.terminal and int(elapsed) != self._last:
            self._last = int(elapsed)
            print(f"\r{self.what}: {self._last} s{self.note}", end="", file=sys.stderr,
                  flush=True)

    def __exit__(self, *exc):
        if self.enabled and self.terminal:
            print(file=sys.stderr, flush=True)
        return False
