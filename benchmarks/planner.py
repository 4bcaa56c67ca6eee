"""Benchmark: what the planner predicts for a 3D U-Net at 128^3 and 256^3 on 1, 8, 16 cores.

Two configurations: spatial_tf's default (depth 3, 8-32 filters) and spatial_tf's
unet3d at the size of Model Garden's volumetric 3D U-Net (official/projects/
volumetric_models: 4 levels, base_filters 32, batch norm; spatial_tf's blocks, so 32-256
filters, where Model Garden's second convolution of a level doubles them, up to 512:
benchmarks/model_garden_step.py compiles Model Garden's own). Train step: batch 1, 3 classes, spatial_tf's
cross-entropy + soft Dice, Adam. For each core count every candidate spec is compiled at
32^3, 48^3 and 64^3 on the emulator, per-core peak bytes fitted against voxels and
predicted at 128^3 and 256^3 (XLA:CPU's figure and the TPU tile-padding estimate).
Printed: the recommended spec and its per-core peak, the largest cube that fits a v3
core (16 GiB HBM less the 10% reserve), its growth against the ideal N^(1/3), the
fewest cores (of those planned) for 256^3 on v3, and the fit's error against a direct
compile at --check on 8 cores.

    python benchmarks/planner.py                      # both models, 1, 8, 16 cores
    python benchmarks/planner.py --models default --cores 1,8
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

MODELS = {
    "default": ("spatial_tf default (depth 3, 8-32 filters)", 3, 8),
    "garden": ("unet3d at Model Garden size (4 levels, 32-256 filters)", 4, 32),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="default,garden", help="default, garden or both")
    p.add_argument("--cores", default="1,8,16", help="core counts (default 1,8,16)")
    p.add_argument("--fit-sizes", default="32,48,64", help="cube edges compiled for the fit")
    p.add_argument("--check", type=int, default=80,
                   help="edge compiled directly on 8 cores to measure the fit's error")
    p.add_argument("--workers", type=int, default=2, help="compiles at once (default 2)")
    args = p.parse_args(argv)

    import spatial_tf
    from spatial_tf import planning
    from spatial_tf.models import unet3d
    from spatial_tf.table import format_bytes, format_table, plural

    fit_sizes = tuple(int(e) for e in args.fit_sizes.split(","))
    core_counts = [int(n) for n in args.cores.split(",")]
    v3 = planning.parse_budget("v3")
    rows, capacity, checks, timings = [], [], [], []
    for key in args.models.split(","):
        title, depth, filters = MODELS[key]

        def model_fn(shape, depth=depth, filters=filters):
            return unet3d(shape, num_classes=3, depth=depth, base_filters=filters)

        pool = 2 ** (depth - 1)
        edges, fits = {}, {"cpu": {}, "tpu": {}}
        for n in core_counts:
            start = time.perf_counter()
            plan = spatial_tf.plan(
                model_fn((fit_sizes[0],) * 3 + (1,)), (1, 128, 128, 128, 1), n, "v3",
                fit_sizes=fit_sizes, fit_check=args.check if n == 8 else None,
                model_fn=model_fn, workers=args.workers, progress=False)
            timings.append((title, n, time.perf_counter() - start, len(plan.candidates)))
            print(f"  {title}, {plural(n, 'core')}: planned in {timings[-1][2]:.0f} s", flush=True)
            for size in (128, 256):
                at = plan if size == 128 else plan.at((1, size, size, size, 1))
                best = at.recommended or min(at.candidates, key=lambda c: c.peak("tpu"))
                rows.append([title, n, f"{size}^3", _spec(best.spec), format_bytes(best.cpu["peak"]),
                             format_bytes(best.tpu["peak"]),
                             "yes" if best.fits else "no",
                             format_bytes(best.halo_bytes)])
            for basis in ("tpu", "cpu"):
                edge, c = plan.with_budget(v3, memory=basis).largest_edge(multiple=pool)
                edges[(basis, n)] = (edge, c)
                fits[basis][n] = min((x for x in plan.candidates if x.ok),
                                     key=lambda x: x.fit[basis].predict(256**3)).fit[basis]
            for c in plan.candidates:
                if c.fit and c.fit.get("check"):
                    ch = c.fit["check"]
                    checks.append([title, _spec(c.spec), f"{ch['edge']}^3",
                                   format_bytes(ch["measured"]), f"{ch['error']:+.1%}",
                                   format_bytes(ch["measured_tpu"]), f"{ch['tpu_error']:+.1%}"])
        for n in core_counts:
            row = [title, n]
            for basis in ("tpu", "cpu"):
                edge, c = edges[(basis, n)]
                growth = edge / edges[(basis, 1)][0] if (basis, 1) in edges and edges[(basis, 1)][0] else None
                row += [f"{edge}^3 {_spec(c.spec) if c else ''}",
                        "-" if growth is None or n == 1 else
                        f"{growth:.2f} ({growth / n ** (1 / 3):.2f} of N^(1/3))"]
            capacity.append(row)
        for basis in ("tpu", "cpu"):
            need = planning.fewest_cores(fits[basis], 256**3, v3.usable)
            capacity.append([title, "256^3 on v3", f"fewest cores ({basis}): "
                             f"{need if need else 'more than ' + str(max(core_counts))}", "", "", ""])

    print()
    print(format_table(
        ["model", "N", "volume", "recommended", "peak CPU", "peak TPU est.", "fits v3", "halo"],
        rows, title=f"Predicted per-core memory (fit from "
                    f"{', '.join(f'{e}^3' for e in fit_sizes)}), 3D U-Net train step, batch 1, "
                    f"v3 budget {format_bytes(v3.usable)} per core",
        right=("N", "peak CPU", "peak TPU est.", "halo")))
    print()
    print(format_table(
        ["model", "N", "largest cube on v3 (TPU est.)", "growth", "largest cube on v3 (CPU)",
         "growth"], capacity,
        title="Capacity: the largest cube fitting a v3 core; growth = edge(N) / edge(1), "
              "ideal N^(1/3)"))
    if checks:
        print()
        print(format_table(
            ["model", "spec", "direct compile", "CPU peak", "fit error", "TPU est.", "fit error"],
            checks, title="The fit against a direct compile it did not see (8 cores)"))
    print()
    for title, n, seconds, count in timings:
        print(f"planner time: {title}, {plural(n, 'core')}, {plural(count, 'candidate')}: {seconds:.0f} s")
    return 0


def _spec(spec):
    return "[" + ",".join(map(str, spec)) + "]"


if __name__ == "__main__":
    sys.exit(main())
