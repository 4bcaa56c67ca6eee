"""The TPU compiler's worker: ``python -m spatial_tf.emulator.compile._xla_tpu FOLDER``.

It compiles one program with libtpu's XLA:TPU compiler for compile-only TPU devices (no
TPU needed) and writes what the compiler said to ``FOLDER/result.json``. The program
(``program.pb``, a serialized ``HloModuleProto`` already prepared by ``tpu_compile``) and
the request (``request.json``: topology, cores, sharding propagation flags) are read from
the same folder. It runs in a process of its own (``tpu_compile`` starts it) because
libtpu's compile-only client aborts the interpreter at exit, the TPU platform must be set
up before jax first starts a backend, and a compile that runs too long must be stoppable;
the process ends with ``os._exit`` once the result is written. Verified with jax/jaxlib
0.10.2 and libtpu 0.0.42.1.
"""
import importlib
import json
import os
import sys
import time

__all__ = ["main", "compile_request"]

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
    from spatial_tf.emulator.compile import _xla

    j = _xla._load()
    xc = j.xla_client
    topologies = importlib.import_module("jax.experimental.topologies")
    mlir = importlib.import_module("jax._src.interpreters.mlir")
    ir = importlib.import_module("jax._src.lib.mlir").ir
    n, replicas = int(request["num_partitions"]), int(request.get("num_replicas", 1))
    devices = topologies.get_topology_desc(
        platform="tpu", topology_name=request["topology"]).devices[:n * replicas]
    options = _xla.compile_options(n, replicas, request["free_in"], request["propagate_out"])
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
                    "seconds": time.perf_counter() - start}
    seconds = time.perf_counter() - start
    stats = executable.get_compiled_memory_stats()
    return {
        "status": "compiled",
        "device_kind": devices[0].device_kind,
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
    try:
        result = compile_request(request, hlo)
    except Exception as e:  # set-up failed (topology, versions): reported, not raised
        result = {"status": "error", "message": f"{type(e).__name__}: {e}", "seconds": 0.0}
    partial = os.path.join(folder, "result.json.partial")
    with open(partial, "w") as f:
        json.dump(result, f)
    os.replace(partial, os.path.join(folder, "result.json"))


if __name__ == "__main__":
    for _key, _value in ENVIRONMENT.items():
        os.environ[_key] = _value
    main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # libtpu's compile-only client aborts a normal interpreter exit
