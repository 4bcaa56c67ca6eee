"""Chosen computation shapes for every named slice, next to TPUEstimator's fixed table.

    python benchmarks/topology_choices.py

For each slice and each valid number of cores per replica: the shape the chooser picks,
how many replicas fit, the block's surface (``ab + bc + ca`` in chips; fewer means more
ICI links inside the block), the longest hop count, the hosts one replica touches, and
what TPUEstimator's ``_NUM_CORES_TO_COMPUTATION_SHAPE`` would use ("does not fit" where
``DeviceAssignment.build`` rejects it). No TPU needed.
"""
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from spatial_tf.table import format_table  # noqa: E402
from spatial_tf.topology import SLICES, choose, synthetic  # noqa: E402
from spatial_tf.topology.shapes import block_tasks, rank_shapes, valid_core_counts  # noqa: E402

# tensorflow_estimator/python/estimator/tpu/tpu_context.py, as [x, y, 1, cores].
TPU_ESTIMATOR = {
    1: (1, 1, 1, 1), 2: (1, 1, 1, 2), 4: (1, 2, 1, 2), 8: (2, 2, 1, 2),
    16: (4, 2, 1, 2), 32: (4, 4, 1, 2), 64: (8, 4, 1, 2), 128: (8, 8, 1, 2),
}


def _table_entry(topology, n):
    shape = TPU_ESTIMATOR[n]
    if any(s > m for s, m in zip(shape, topology.mesh_shape)):
        return "does not fit", ""
    ranked = {r.shape: r for r in rank_shapes(topology, n)}
    r = ranked[shape]
    return str(list(shape)), f"{r.surface}/{r.span - 3}/{r.hosts}"


def main():
    rows, start, count = [], time.perf_counter(), 0
    for name in SLICES:
        topology = synthetic(name)
        for n in valid_core_counts(topology):
            choice = choose(topology, num_cores_per_replica=n)
            count += 1
            x, y, z, _ = choice.computation_shape
            hosts = len(block_tasks(topology, choice.computation_shape))
            table_shape, table_figures = _table_entry(topology, n)
            rows.append([
                name, n, str(list(choice.computation_shape)), choice.num_replicas,
                f"{x * y + y * z + z * x}/{x + y + z - 3}/{hosts}",
                table_shape, table_figures,
            ])
    elapsed = time.perf_counter() - start
    print(format_table(
        ["slice", "cores", "chosen shape", "replicas", "surface/hops/hosts",
         "TPUEstimator shape", "its surface/hops/hosts"],
        rows,
        right=("cores", "replicas"),
    ))
    print(f"\n{count} choices in {elapsed:.2f} s ({1000 * elapsed / count:.1f} ms each)")


if __name__ == "__main__":
    main()
