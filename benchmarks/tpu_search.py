"""Benchmark: how long the planner takes to find the fewest TPU cores for a volume.

``planning.search_fewest_cores`` on tensorflow/tpu's (Model Garden's) 3D U-Net preset
(4 levels, 32-512 filters, batch norm, ``mixed_bfloat16``, Adam), batch 1, for v3: core
counts upward, out-of-memory verdicts in seconds, one fitting compile. Run it twice: the
second run reads every compile from the cache (``~/.cache/spatial_tf/compiles``, or
``SPATIAL_TF_COMPILE_CACHE``) and only traces.

    python benchmarks/tpu_search.py                 # 256^3 on v3
    python benchmarks/tpu_search.py --edge 128 --budget v5e
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--edge", type=int, default=256, help="cube edge (default 256)")
    p.add_argument("--budget", default="v3", help="TPU generation (default v3)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    from spatial_tf import planning
    from spatial_tf.models import unet3d

    shape = (1, args.edge, args.edge, args.edge, 1)
    model = unet3d(shape[1:], num_classes=3, preset="model_garden",
                   dtype_policy="mixed_bfloat16")
    found = planning.search_fewest_cores(model, shape, args.budget)
    print(found)
    print(f"whole process: {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
