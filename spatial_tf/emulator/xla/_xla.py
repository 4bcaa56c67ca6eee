"""Every call into jax / jaxlib lives here: device set-up, compile, place, execute, read back.

These are the version-sensitive parts of the emulator (``GSPMDSharding`` and
``hlo_to_stablehlo`` are private jax/jaxlib names), verified with jax/jaxlib 0.10.2; no
other module imports jax. jax is imported on first use, so ``import spatial_tf`` works
without it.

>>> devices = cpu_devices(2)
>>> len(devices)
2
"""
import importlib
import os
import threading
import warnings

import numpy as np

from spatial_tf.checks import check_int
from spatial_tf.emulator.xla import compile_cache

__all__ = [
    "INSTALL_HINT",
    "DEFAULT_CPU_DEVICES",
    "TPU_LIKE_OPTIONS",
    "FAST_COMPILE_ENV",
    "fast_compile_options",
    "configure",
    "cpu_devices",
    "compile_module",
    "Compiled",
]

INSTALL_HINT = 'pip install "spatial-tf[emulator]"'
VERIFIED_JAX = ((0, 10, 2), (0, 11, 0))  # [lowest verified, first unverified)
# Virtual CPU devices made at the emulator's first use. Measured here with jax 0.10.2:
# backend start-up is 0.02-0.05 s for 8 to 256 devices, each device adds about 0.2 MB of
# host memory and an 8-device program runs no slower next to 128 idle devices; 128 is the
# largest num_cores_per_replica TPUConfig allows.
DEFAULT_CPU_DEVICES = 128
DEVICES_ENV = "SPATIAL_TF_CPU_DEVICES"

# XLA options under every emulator compile, so that per-core memory is a TPU's rather
# than XLA:CPU's. A TPU core runs one instruction stream, in a schedule chosen to keep
# memory low; XLA:CPU by default assigns buffers so that independent instructions may
# run at once, which keeps more of them alive. And XLA:CPU merges all of a program's
# all-reduces into one with no size limit (to use its network well), so every partial
# kernel gradient stays alive until the last one is computed; a TPU program all-reduces
# gradients as the backward pass produces them. Measured on Model Garden's 3D U-Net at
# 64^3 over 8 cores: 240 MiB per core with XLA:CPU's defaults, 173 MiB with these.
# A user's ``compiler_options`` override them.
TPU_LIKE_OPTIONS = {
    "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
    "xla_disable_hlo_passes": "cpu-all-reduce-combiner",
}

# SPATIAL_TF_FAST_COMPILE=1: XLA:CPU's code generation without LLVM's optimizations
# (xla_backend_optimization_level 0) for every emulator compile. The HLO passes, the SPMD
# partitioner and buffer assignment are unchanged, so partitions, collectives and memory
# figures are the same; compiles take about a third less CPU (176.8 -> 113.7 s on
# tests/emulator/test_nets.py and tests/detection/test_detection_step.py) and the
# compiled steps run slower. For test suites of small steps (spatial_tf's own sets it).
FAST_COMPILE_ENV = "SPATIAL_TF_FAST_COMPILE"
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0}

_lock = threading.Lock()
_jax = None  # namespace of the modules below, once imported


class _Jax:
    def __init__(self):
        self.jax = importlib.import_module("jax")
        importlib.import_module("jax.extend.backend")
        self.xla_client = importlib.import_module("jaxlib.xla_client")
        self.xla_bridge = importlib.import_module("jax._src.xla_bridge")
        self.GSPMDSharding = importlib.import_module("jax._src.sharding_impls").GSPMDSharding


def _load():
    global _jax
    if _jax is None:
        try:
            loaded = _Jax()
        except ImportError as e:
            raise ImportError(
                f"spatial_tf.emulator needs jax and jaxlib 0.10.x, which could not be "
                f"imported ({e}). Fix: {INSTALL_HINT}"
            ) from e
        _check_version(loaded.jax.__version__)
        _jax = loaded
    return _jax


def assemble(pieces, sharding, shape):
    """The whole array from per-device ``pieces`` (indexed by device ordinal) of a tiled
    ``sharding``, uneven tilings included: XLA pads every piece of an axis that does not
    divide to the same size (a 3-wide kernel axis tiled 2 ways gives pieces of 2), which
    is cut off here. Axes of the tile assignment past the array's rank (replication
    subgroups) hold copies; the first is taken.
    """
    dims = list(sharding.tile_assignment_dimensions())
    rank = len(shape)
    grid = np.asarray(sharding.tile_assignment_devices()).reshape(dims)
    grid = grid.reshape(dims[:rank] + [-1])[..., 0]
    tile = [-(-size // count) for size, count in zip(shape, dims[:rank])]
    first = np.asarray(pieces[int(grid.flat[0])])
    whole = np.zeros([t * n for t, n in zip(tile, dims[:rank])], first.dtype)
    for index in np.ndindex(*dims[:rank]):
        piece = np.asarray(pieces[int(grid[index])])
        whole[tuple(slice(i * t, i * t + p) for i, t, p in zip(index, tile, piece.shape))] = piece
    return whole[tuple(slice(0, size) for size in shape)]


def _check_version(version):
    parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    low, high = VERIFIED_JAX
    if not low <= parts < high:
        warnings.warn(
            f"spatial_tf.emulator was verified with jax {'.'.join(map(str, low))} up to "
            f"(not including) {'.'.join(map(str, high))}; found jax {version}. If the "
            f"emulator fails, install the verified range: {INSTALL_HINT}",
            stacklevel=3,
        )


# ---------------------------------------------------------------- devices


def configure(num_devices, *, only_if_unset=False):
    """Make jax's CPU backend start with ``num_devices`` virtual devices.

    Call before the first emulator (or any jax computation) in the process; afterwards
    the device count is fixed. Also settable with the environment variable
    ``SPATIAL_TF_CPU_DEVICES``. With ``only_if_unset``, nothing happens (and nothing is
    checked) when jax already started or its device count was set by someone else.

    Raises:
      ValueError: ``num_devices`` is not a positive int.
      RuntimeError: jax already started with fewer devices.
    """
    num_devices = check_int(num_devices, "num_devices", "configure(64)", where="configure")
    j = _load()
    with _lock:
        started = j.xla_bridge.backends_are_initialized()
        if only_if_unset and (started or j.jax.config.jax_num_cpu_devices >= 0):
            return
        if started:
            _check_enough(j, int(num_devices))
            return
        j.jax.config.update("jax_num_cpu_devices", int(num_devices))
        _cpu_only(j)


def _default_count():
    raw = os.environ.get(DEVICES_ENV)
    if raw is None:
        return DEFAULT_CPU_DEVICES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"{DEVICES_ENV}={raw!r}; expected a positive int, e.g. {DEVICES_ENV}=64."
        )
    return value


def fast_compile_options() -> dict:
    """``FAST_COMPILE_OPTIONS`` when ``$SPATIAL_TF_FAST_COMPILE`` is on (1, true, yes,
    on), else none.

    >>> saved = os.environ.get(FAST_COMPILE_ENV)
    >>> os.environ[FAST_COMPILE_ENV] = "1"; fast_compile_options()
    {'xla_backend_optimization_level': 0}
    >>> os.environ[FAST_COMPILE_ENV] = "off"; fast_compile_options()
    {}
    >>> os.environ[FAST_COMPILE_ENV] = saved if saved is not None else ""

    Raises:
      ValueError: a value that is neither on nor off (the message names it and the fix).
    """
    raw = os.environ.get(FAST_COMPILE_ENV, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return {}
    if raw in ("1", "true", "yes", "on"):
        return dict(FAST_COMPILE_OPTIONS)
    raise ValueError(
        f"{FAST_COMPILE_ENV}={raw!r}; expected 1 (XLA:CPU compiles without LLVM's "
        f"optimizations) or 0. Fix: {FAST_COMPILE_ENV}=1, or unset it.")


def cpu_devices(n):
    """The first ``n`` virtual CPU devices, starting jax's CPU backend if needed."""
    j = _load()
    with _lock:
        if not j.xla_bridge.backends_are_initialized():
            user_set = j.jax.config.jax_num_cpu_devices >= 0 or (
                "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            )
            if not user_set:
                j.jax.config.update("jax_num_cpu_devices", max(n, _default_count()))
            _cpu_only(j)
        return _check_enough(j, n)


def _cpu_only(j):
    """Start jax's CPU backend alone unless the user chose platforms (``JAX_PLATFORMS``):
    the emulator runs on CPU, and with libtpu installed (for the TPU compile target) jax
    would also try to start a TPU backend, with warnings about TPU hosts it cannot find."""
    if not os.environ.get("JAX_PLATFORMS"):
        j.jax.config.update("jax_platforms", "cpu")


def _check_enough(j, n):
    devices = j.jax.devices("cpu")
    if len(devices) < n:
        raise RuntimeError(
            f"the emulator needs {n} virtual CPU devices but jax started with "
            f"{len(devices)}, and the count cannot change once jax is running. Fix: set "
            f"{DEVICES_ENV}={n} in the environment, or call "
            f"spatial_tf.emulator.configure({n}) before the first emulator or jax "
            f"computation in the process."
        )
    return devices[:n]


# ---------------------------------------------------------------- compile and run


def compile_module(hlo_module_proto, num_partitions, compiler_options=None, *, num_replicas=1,
                   whole_parameters=(), whole_results=()):
    """Compile a serialized ``HloModuleProto`` for ``num_replicas x num_partitions`` devices.

    With more than one partition, XLA's SPMD partitioner splits the program along the
    module's sharding annotations. With one replica, parameters take the shardings it
    propagates. With several, replica ``r`` runs on devices ``r*P ... r*P + P - 1`` and
    cross-replica collectives (``XlaAllReduce``) connect the replicas; the module must
    then keep parameters and results whole within a replica (``replicas.py``), because
    jax's runtime describes shardings over all devices, not over one replica's.
    ``compiler_options`` are XLA debug options by name, e.g.
    ``{"xla_cpu_enable_fast_math": True}``, over ``TPU_LIKE_OPTIONS``. The parameters numbered in
    ``whole_parameters`` take no propagated sharding: they are whole on every core, as
    TPUStrategy keeps a variable (TensorFlow's TPU sharding pass replicates an argument
    with no ``XlaSharding`` after it and gives an updated variable its argument's
    sharding). With any ``whole_results`` (the updated variables), every result is whole.
    """
    j = _load()
    xc = j.xla_client
    devices = cpu_devices(num_replicas * num_partitions)
    module = xc._xla.mlir.hlo_to_stablehlo(hlo_module_proto)
    free_in, propagate_out = propagation(hlo_module_proto, num_replicas, whole_parameters,
                                         whole_results)
    options = compile_options(num_partitions, num_replicas, free_in, propagate_out)
    overrides = {**TPU_LIKE_OPTIONS, **fast_compile_options(), **(compiler_options or {})}
    options.env_option_overrides = list(overrides.items())  # typed values
    backend = j.jax.extend.backend.get_backend("cpu")
    entry = compile_cache.program_key(
        hlo_module_proto, "cpu", num_partitions, num_replicas, free_in, propagate_out,
        sorted(overrides.items()), j.jax.__version__, compile_cache.host_cpu())
    cached = _load_executable(backend, entry, devices, options)
    if cached is not None:
        return Compiled(cached, devices, num_replicas=num_replicas)
    compiled = Compiled(backend.compile_and_load(module, devices, options), devices,
                        num_replicas=num_replicas)
    compiled = _with_even_tiling(compiled, backend, module, devices, options, free_in,
                                 hlo_module_proto, num_replicas)
    compile_cache.store_bytes(entry, backend.serialize_executable(compiled.executable))
    return compiled


def _load_executable(backend, entry, devices, options):
    """The executable the compile cache holds for ``entry``, or None (absent, or made by
    another jaxlib that cannot load it)."""
    data = compile_cache.load_bytes(entry)
    if data is None:
        return None
    try:
        return backend.deserialize_executable(
            data, _load().xla_client._xla.DeviceList(tuple(devices)), options)
    except Exception:  # noqa: BLE001 - a stale entry is compiled again, not an error
        return None


def _with_even_tiling(compiled, backend, module, devices, options, free_in, hlo_module_proto,
                      num_replicas):
    """``compiled``, or the program compiled again with whole arguments and results where
    XLA propagated a tiling that does not divide them (see below)."""
    build = options.executable_build_options
    propagate = num_replicas == 1
    parameters, results = entry_dimensions(hlo_module_proto)
    if propagate and compiled.parameter_shardings:
        # XLA may propagate a tiling that does not divide a tensor argument or result (a
        # 3-wide axis split 2 ways); jax cannot place such an array, so the program is
        # compiled again with those parameters whole on every core and its results whole
        # (captured variables are whole already: ``whole_parameters``)
        uneven_in = [not divides(s, d) for s, d in zip(compiled.parameter_shardings, parameters)]
        uneven_out = [not divides(s, d) for s, d in zip(compiled.output_shardings or [], results)]
        if any(uneven_in) or any(uneven_out):  # an updated weight is aliased to its input
            build.allow_spmd_sharding_propagation_to_parameters = [
                free and not u for free, u in zip(free_in, uneven_in)]
            build.allow_spmd_sharding_propagation_to_output = [False]  # results whole
            compiled = Compiled(backend.compile_and_load(module, devices, options), devices,
                                num_replicas=num_replicas)
    return compiled


def compile_options(num_partitions, num_replicas, free_in, propagate_out):
    """XLA's ``CompileOptions`` for ``num_replicas x num_partitions`` devices, whatever the
    backend (``compile_module`` and the TPU compiler's worker, ``_xla_tpu``, share them).

    ``free_in[i]``: parameter ``i`` takes the sharding XLA propagates (else it is whole
    on every core, or as annotated); ``propagate_out``: results take propagated shardings.
    """
    xc = _load().xla_client
    options = xc.CompileOptions()
    build = options.executable_build_options
    build.num_partitions = num_partitions
    build.num_replicas = num_replicas
    build.use_spmd_partitioning = num_partitions > 1
    build.device_assignment = xc.DeviceAssignment.create(
        np.arange(num_replicas * num_partitions).reshape(num_replicas, num_partitions)
    )
    build.allow_spmd_sharding_propagation_to_parameters = list(free_in)
    build.allow_spmd_sharding_propagation_to_output = [bool(propagate_out)]
    return options


def propagation(hlo_module_proto, num_replicas=1, whole_parameters=(), whole_results=()):
    """``(free_in, propagate_out)`` for ``compile_options``: with one replica, parameters
    not in ``whole_parameters`` take propagated shardings; results do unless the program
    writes variables (``whole_results``: XLA honours the flag for all results or none, so
    a program that updates variables returns every result whole; a train step's loss and
    metrics are whole anyway)."""
    propagate = num_replicas == 1
    parameters, _ = entry_dimensions(hlo_module_proto)
    free_in = [propagate and i not in whole_parameters for i in range(len(parameters))]
    return free_in or [propagate], propagate and not whole_results


def hlo_module_text(hlo_module_proto):
    """A serialized ``HloModuleProto`` as HLO text (before any partitioning)."""
    return _load().xla_client.XlaComputation(hlo_module_proto).as_hlo_text()


def entry_dimensions(hlo_module_proto):
    """``(parameters, results)``: the entry computation's array sizes, from a serialized
    ``HloModuleProto`` (results: the root tuple's elements, or the root itself)."""
    from spatial_tf._tf_internals import hlo_pb2

    shape = hlo_pb2.HloModuleProto.FromString(hlo_module_proto).host_program_shape
    def leaves(s):
        return [x for t in s.tuple_shapes for x in leaves(t)] if s.tuple_shapes else [s]

    return ([list(p.dimensions) for p in shape.parameters],
            [list(r.dimensions) for r in leaves(shape.result)])


def divides(sharding, dimensions):
    """True unless ``sharding`` tiles an axis of ``dimensions`` into unequal pieces."""
    if not sharding.is_tiled():
        return True
    counts = sharding.tile_assignment_dimensions()[:len(dimensions)]
    return all(size % count == 0 for size, count in zip(dimensions, counts))


class Compiled:
    """A loaded executable with its devices: place inputs, run, read outputs back."""

    def __init__(self, executable, devices, num_replicas=1):
        j = _load()
        self._j = j
        self.executable = executable
        self.devices = list(devices)
        self.num_replicas = num_replicas
        self._replicated = j.xla_client.HloSharding.replicate()
        self.parameter_shardings = self._shardings(executable.get_parameter_shardings())
        self.output_shardings = self._shardings(executable.get_output_shardings())

    def _shardings(self, protos):
        # None for a one-device program: everything is whole on that device
        if protos is None:
            return None
        return [self._j.xla_client.HloSharding.from_proto(s) for s in protos]

    def memory_stats(self):
        """Per-device bytes: argument, output, alias, temp, generated code."""
        s = self.executable.get_compiled_memory_stats()
        return {
            "argument": int(s.argument_size_in_bytes),
            "output": int(s.output_size_in_bytes),
            "alias": int(s.alias_size_in_bytes),
            "temp": int(s.temp_size_in_bytes),
            "code": int(s.generated_code_size_in_bytes),
        }

    def hlo_text(self):
        """The compiled (partitioned, optimized) program as HLO text."""
        return self.executable.hlo_modules()[0].to_string()

    def sharding_strings(self):
        """``(parameters, outputs)`` shardings as XLA prints them, e.g. ``{replicated}``."""
        return [str(s) for s in self.parameter_shardings or []], [
            str(s) for s in self.output_shardings or []
        ]

    def parameter_pieces(self):
        """How many distinct pieces each parameter is cut into (1 = whole on each core)."""
        pieces = []
        for sharding in self.parameter_shardings or []:
            count = 1
            if sharding.is_tiled():
                dims = sharding.tile_assignment_dimensions()
                if sharding.replicate_on_last_tile_dim():
                    dims = dims[:-1]
                for d in dims:
                    count *= d
            pieces.append(count)
        return pieces

    def run(self, arrays, output_shapes):
        """Place ``arrays`` per the parameter shardings, execute, return NumPy outputs.

        Raises ValueError if the number of arrays does not match the program's parameters.
        """
        parameter_shardings = self.parameter_shardings or [self._replicated] * len(arrays)
        if len(arrays) != len(parameter_shardings):
            raise ValueError(
                f"the compiled program takes {len(parameter_shardings)} arrays; "
                f"got {len(arrays)}"
            )
        with self._j.jax.enable_x64(True):  # keep int64/float64 as they are
            return self._run(arrays, parameter_shardings, output_shapes)

    def _run(self, arrays, parameter_shardings, output_shapes):
        j = self._j
        placed = [
            j.jax.device_put(a, j.GSPMDSharding(self.devices, s))
            for a, s in zip(arrays, parameter_shardings)
        ]
        per_output = self.executable.execute_sharded(placed).disassemble_into_single_device_arrays()
        output_shardings = self.output_shardings or [self._replicated] * len(per_output)
        results = []
        for shards, sharding, shape in zip(per_output, output_shardings, output_shapes):
            if sharding.is_replicated():
                results.append(np.asarray(shards[0]))
                continue
            if sharding.is_maximal():  # held whole by one device
                results.append(np.asarray(shards[sharding.tile_assignment_devices()[0]]))
                continue
            results.append(assemble(shards, sharding, tuple(shape)))
        return results

    def run_replicas(self, per_replica_arrays):
        """Run a multi-replica program: ``per_replica_arrays[r]`` feeds replica ``r``.

        Parameters and results are whole within a replica (see ``compile_module``), so
        every device of replica ``r`` gets replica ``r``'s arrays and its results are read
        from the replica's first device. Returns one list of NumPy outputs per replica.
        """
        j = self._j
        num_devices = len(self.devices)
        per_device = num_devices // self.num_replicas
        mesh = j.jax.sharding.Mesh(np.array(self.devices), ("devices",))
        whole = j.jax.sharding.NamedSharding(mesh, j.jax.sharding.PartitionSpec())
        with j.jax.enable_x64(True):
            placed = []
            for i in range(len(per_replica_arrays[0])):
                buffers = [
                    j.jax.device_put(per_replica_arrays[d // per_device][i], device)
                    for d, device in enumerate(self.devices)
                ]
                # one buffer per device, each the full per-replica value: described to jax
                # as "replicated", which only checks that the shapes agree
                placed.append(j.jax.make_array_from_single_device_arrays(
                    buffers[0].shape, whole, buffers))
            results = self.executable.execute_sharded(placed)
            per_output = results.disassemble_into_single_device_arrays()
            return [
                [np.asarray(shards[r * per_device]) for shards in per_output]
                for r in range(self.num_replicas)
            ]
