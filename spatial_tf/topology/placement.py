"""A table of where every logical core of every replica runs, and what it holds.

>>> from spatial_tf.topology import device_assignment, synthetic
>>> import tensorflow as tf
>>> da = device_assignment(synthetic("v3-8"), num_cores_per_replica=4)
>>> print(describe(da, {"image": tf.TensorSpec([2, 64, 64, 3])}, {"image": [1, 2, 2, 1]}))
2 replicas x 4 logical cores on v3-8 (mesh_shape [2, 2, 1, 2]), 1 host
replica  core  task  x  y  z  chip core  TPU ordinal  inputs['image']
-------  ----  ----  -  -  -  ---------  -----------  ------------------------
      0     0     0  0  0  0          0            0  [0:2, 0:32, 0:32, 0:3]
      0     1     0  0  0  0          1            1  [0:2, 0:32, 32:64, 0:3]
      0     2     0  0  1  0          0            4  [0:2, 32:64, 0:32, 0:3]
      0     3     0  0  1  0          1            5  [0:2, 32:64, 32:64, 0:3]
      1     0     0  1  0  0          0            2  [0:2, 0:32, 0:32, 0:3]
      1     1     0  1  0  0          1            3  [0:2, 0:32, 32:64, 0:3]
      1     2     0  1  1  0          0            6  [0:2, 32:64, 0:32, 0:3]
      1     3     0  1  1  0          1            7  [0:2, 32:64, 32:64, 0:3]
"""
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from spatial_tf._tf_internals import tpu_device_assignment
from spatial_tf.context import EmulatedLayout
from spatial_tf.spec import (Assign, PartialTile, Tile, check_order, flatten_with_paths,
                             looks_like_spec, validate)
from spatial_tf.table import format_table, plural
from spatial_tf.topology.assignment import slice_label

__all__ = ["describe", "tile_of_core", "as_device_assignment"]

_HEADERS = ["replica", "core", "task", "x", "y", "z", "chip core", "TPU ordinal"]
_EMULATOR_HEADERS = ["replica", "host", "core", "virtual device"]


def as_device_assignment(obj: Any) -> tf.tpu.experimental.DeviceAssignment:
    """A ``DeviceAssignment`` from itself or from a ``TPUStrategy`` built with one."""
    if isinstance(obj, tf.tpu.experimental.DeviceAssignment):
        return obj
    if isinstance(obj, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy)):
        da = tpu_device_assignment(obj)
        if isinstance(da, tf.tpu.experimental.DeviceAssignment):
            return da
    raise TypeError(
        f"describe: expected a tf.tpu.experimental.DeviceAssignment or a TPUStrategy "
        f"built with experimental_device_assignment, or a spatial_tf.Emulator; got "
        f"{obj!r} ({type(obj).__name__}). Fix: pass "
        f"spatial_tf.topology.device_assignment(...), the strategy from "
        f"spatial_tf.tpu_strategy(...) or the one from spatial_tf.auto(...)."
    )


def describe(layout: Any, inputs: Any = None, spec: Any = None) -> str:
    """Return a text table: replica x logical core -> where it runs.

    ``layout``: a ``DeviceAssignment`` or a ``TPUStrategy`` (task, chip coordinates, TPU
    ordinal of each core), or a ``spatial_tf.Emulator`` (the virtual CPU device of each).
    With ``inputs`` (tensors, ``tf.TensorSpec`` s or an ``element_spec``) and ``spec``,
    one more column per input tensor shows the piece of it each logical core holds,
    ``[start:stop, ...]`` per axis (a tile index ``(i, j, ...)`` when a size is unknown).
    The spec-first order of releases before 0.2 raises ``TypeError`` saying so.
    """
    if inputs is not None and spec is not None:
        check_order(inputs, spec, "describe")
    elif spec is None and looks_like_spec(inputs):  # describe(da, spec): no inputs given
        inputs, spec = None, inputs
    if isinstance(layout, EmulatedLayout):
        return _describe_emulator(layout, _columns(inputs, spec, layout.num_cores_per_replica))
    da = as_device_assignment(layout)
    columns = _columns(inputs, spec, da.num_cores_per_replica)
    rows = []
    for replica in range(da.num_replicas):
        for core in range(da.num_cores_per_replica):
            x, y, z, chip_core = (int(c) for c in da.coordinates(replica, core))
            task = int(da.topology.task_ordinal_at_coordinates((x, y, z, chip_core)))
            row = [replica, core, task, x, y, z, chip_core, int(da.tpu_ordinal(replica, core))]
            rows.append(row + [cells[core] for _, cells in columns])
    title = (
        f"{plural(da.num_replicas, 'replica')} x "
        f"{plural(da.num_cores_per_replica, 'logical core')} on {_where(da.topology)}, "
        f"{plural(len({r[2] for r in rows}), 'host')}"
    )
    return format_table(_HEADERS + [path for path, _ in columns], rows, title=title)


def _columns(inputs, spec, num_cores):
    if spec is None and inputs is None:
        return []
    if spec is None or inputs is None:
        given, missing = ("spec", "inputs") if inputs is None else ("inputs", "spec")
        raise ValueError(
            f"describe: got {given} without {missing}. Pass both (inputs may be "
            f"tf.TensorSpec's or a dataset's element_spec) to see which tile each "
            f"core holds, or neither."
        )
    return _tensor_columns(inputs, spec, num_cores)


def _describe_emulator(emulator, columns):
    cores = emulator.num_cores_per_replica
    layout = emulator.host_layout
    tasks = layout.core_tasks  # from a topology: the TPU host of each logical core
    rows = []
    for replica, host in enumerate(layout.pipeline_of_replica):
        for core in range(cores):
            device = emulator.devices[replica * cores + core]
            name = f"CPU:{getattr(device, 'id', replica * cores + core)}"
            where = [tasks[replica][core]] if tasks else []
            rows.append([replica, host, core] + where + [name]
                        + [cells[core] for _, cells in columns])
    headers = _EMULATOR_HEADERS[:3] + (["task"] if tasks else []) + _EMULATOR_HEADERS[3:]
    return format_table(headers + [path for path, _ in columns], rows,
                        title=_emulator_title(emulator))


def _emulator_title(emulator):
    layout, cores = emulator.host_layout, emulator.num_cores_per_replica
    hosts = layout.num_hosts
    fed = sorted(set(layout.replicas_per_pipeline))
    title = (
        f"{plural(emulator.num_replicas, 'replica')} x {plural(cores, 'logical core')} on "
        f"the CPU emulator ({plural(len(emulator.devices), 'virtual CPU device')}"
        + (f", {hosts} hosts with {' or '.join(map(str, fed))} "
           f"{'replica' if fed == [1] else 'replicas'} each"
           if hosts > 1 else "") + ")"
    )
    if layout.device_assignment is None:
        return title
    tasks = ", ".join(map(str, layout.pipeline_tasks))
    title += (f" as on {layout.slice_name}\nhost: the input pipeline feeding the replica, "
              f"run by task {tasks} for host 0 to {hosts - 1}; task: the TPU host of the core")
    across = layout.fed_across_hosts()
    if across:
        title += (f"\nreplicas {', '.join(map(str, across))} are fed by another task than "
                  f"their own: TPUStrategy hands replica i the i-th batch of the hosts' "
                  f"pipelines in order, so on a TPU their batches cross hosts every step")
    return title


def _where(topology):
    label = slice_label(topology)
    mesh = [int(m) for m in topology.mesh_shape]
    return label if label.startswith("this") else f"{label} (mesh_shape {mesh})"


def _tensor_columns(inputs, spec, num_cores):
    tree = validate(inputs, spec, num_cores)
    columns = []
    for (path, leaf), (_, x) in zip(
        flatten_with_paths(tree), flatten_with_paths(inputs), strict=True
    ):
        shape = tf.TensorShape(x.shape).as_list()
        columns.append((path, [tile_of_core(leaf, shape, k, num_cores) for k in range(num_cores)]))
    return columns


def tile_of_core(leaf: Any, shape: Sequence[Optional[int]], core: int, num_cores: int) -> str:
    """What logical ``core`` holds of a tensor of ``shape`` laid out by ``leaf``.

    >>> tile_of_core(Tile(1, 2), [4, 10], 1, 2)
    '[0:4, 5:10]'
    >>> tile_of_core(Tile(1, 2), [None, 10], 1, 2)
    'tile (0, 1)'
    """
    if isinstance(leaf, Assign):
        return "whole" if leaf.core == core else "-"
    if not isinstance(leaf, Tile):
        return "whole (replicated)"
    where = np.argwhere(leaf.tile_assignment(num_cores) == core)[0]
    index = [int(i) for i in where[: len(leaf.dims)]]  # PartialTile: drop the replica axis
    suffix = " (shared)" if isinstance(leaf, PartialTile) else ""
    if any(s is None for s in shape):
        return f"tile ({', '.join(map(str, index))}){suffix}"
    sizes = [s for s in shape if s is not None]  # all of them: none is unknown here
    bounds = []
    for i, size, d in zip(index, sizes, leaf.dims):
        step = size // d
        bounds.append(f"{i * step}:{(i + 1) * step}")
    return f"[{', '.join(bounds)}]{suffix}"
