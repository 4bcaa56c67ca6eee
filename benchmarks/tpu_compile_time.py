"""Benchmark: where a fitting TPU compile's time goes, and what libtpu flags change.

The default U-Net of ``python -m spatial_tf plan`` (128^3, batch 1, Adam) on 8 v5e cores
with one spec is compiled by XLA's TPU compiler once per setting, the compile cache off,
with libtpu's pass timings on (``--xla_jf_print_compilation_stats``, read from the log
that ``SPATIAL_TF_TPU_COMPILER_LOG`` keeps). Per setting: the whole compile, the CPU
time of its worker process, the time in XLA's HLO passes (the rest is buffer assignment
and the TPU back end's code generation), the temp memory and the predicted step time,
so that a flag which saves time and one which changes the answer are told apart.

    python benchmarks/tpu_compile_time.py                         # the default only
    python benchmarks/tpu_compile_time.py --flag=--xla_jf_llvm_use_fast_opt=true
    python benchmarks/tpu_compile_time.py --spec 1,2,1,1,1 --shape 1,32,32,32,1

Each row is a compile of minutes on a 2-core machine; run it on a quiet one.
"""
import argparse
import os
import re
import resource
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

STATS = "--xla_jf_print_compilation_stats=true"


def hlo_pass_seconds(log: str):
    """The HLO passes' total time libtpu printed (seconds), or None."""
    found = re.findall(r"Total runtime \(ms\) of HLO passes: ([\d.]+)", log)
    return sum(float(ms) for ms in found) / 1000 if found else None


def compile_once(flags, shape, spec, cores, generation):
    """One compile with ``flags`` added to LIBTPU_INIT_ARGS: its figures as a dict."""
    from spatial_tf import planning
    from spatial_tf.emulator.tpu import tpu_compile
    from spatial_tf.models import unet3d

    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "compiler.log")
        settings = {"LIBTPU_INIT_ARGS": f"{STATS} {flags}".strip(), tpu_compile.LOG_ENV: log,
                    "SPATIAL_TF_COMPILE_CACHE": "off",  # libtpu's info lines carry the stats
                    "TPU_MIN_LOG_LEVEL": "0", "TPU_STDERR_LOG_LEVEL": "0"}
        saved = {k: os.environ.get(k) for k in settings}
        os.environ.update(settings)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        try:
            model = unet3d(shape[1:])
            result = planning.plan(model, shape, cores, generation, specs=[spec],
                                   options=planning.PlanOptions(progress=False))
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.update({key: value})
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        text = open(log, errors="replace").read() if os.path.exists(log) else ""
    c = result.candidates[0]
    return {"flags": flags or "(default)", "seconds": seconds,
            "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "hlo": hlo_pass_seconds(text), "fits": c.tpu_fits, "temp": c.tpu.get("temp"),
            "step": c.step_time, "error": None if c.ok else c.reason}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flag", action="append", default=[], metavar="=SETTING",
                        help="a LIBTPU_INIT_ARGS setting to compare with the default, one "
                             "row each (give it as --flag=--xla_...=value)")
    parser.add_argument("--shape", default="1,128,128,128,1")
    parser.add_argument("--spec", default="1,8,1,1,1")
    parser.add_argument("--generation", default="v5e")
    args = parser.parse_args(argv)
    from spatial_tf import logs
    from spatial_tf.emulator.tpu.tpu_compile import libtpu_version
    from spatial_tf.table import format_bytes, format_table

    if libtpu_version() is None:
        print("needs libtpu: pip install 'spatial-tf[tpu-compile]'", file=sys.stderr)
        return 2
    logs.start_tensorflow()
    shape = tuple(int(v) for v in args.shape.split(","))
    spec = tuple(int(v) for v in args.spec.split(","))
    cores = 1
    for count in spec:
        cores *= count
    rows = []
    for flags in [""] + args.flag:
        r = compile_once(flags, shape, spec, cores, args.generation)
        rows.append([r["flags"], f"{r['seconds']:.1f}", f"{r['cpu']:.1f}",
                     "?" if r["hlo"] is None else f"{r['hlo']:.2f}",
                     r["error"] or ("yes" if r["fits"] else "no"),
                     format_bytes(r["temp"]) if r["temp"] is not None else "-",
                     "-" if r["step"] is None else f"{r['step'] * 1e3:.2f} ms"])
        print(rows[-1], file=sys.stderr, flush=True)
    print(format_table(
        ["LIBTPU_INIT_ARGS", "compile s", "CPU s", "HLO passes s", "fits", "temp",
         "step est."], rows,
        title=f"U-Net {args.shape}, {list(spec)} on {cores} {args.generation} cores: the TPU "
              f"compiler (XLA:TPU, libtpu {libtpu_version()}), compile cache off",
        right=("compile s", "CPU s", "HLO passes s", "temp", "step est.")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
