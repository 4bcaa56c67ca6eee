"""A table of how each input tensor is laid out over the cores of a replica.

>>> import tensorflow as tf
>>> print(summary({"image": tf.TensorSpec([8, 256, 256, 3]), "label": tf.TensorSpec([8], tf.int32)},
...               {"image": [1, 2, 2, 1], "label": None}, num_cores_per_replica=4))
path             global shape      dtype    spec              shard shape       bytes/core
---------------  ----------------  -------  ----------------  ----------------  ----------
inputs['image']  (8, 256, 256, 3)  float32  Tile(1, 2, 2, 1)  (8, 128, 128, 3)     1.5 MiB
inputs['label']  (8,)              int32    Replicate()       (8,)                    32 B
total per core                                                                     1.5 MiB

A tensor placed with ``Assign(k)`` lives on core k only, so cores then hold different
amounts; the totals say what each holds:

>>> x = tf.TensorSpec([1024], tf.float32)
>>> print(summary((x, x), [Assign(0), Assign(1)], num_cores_per_replica=4))
path                global shape  dtype    spec       shard shape        bytes/core
------------------  ------------  -------  ---------  -----------  ----------------
features            (1024,)       float32  Assign(0)  (1024,)      4.0 KiB (core 0)
labels              (1024,)       float32  Assign(1)  (1024,)      4.0 KiB (core 1)
total on core 0                                                             4.0 KiB
total on core 1                                                             4.0 KiB
total on cores 2-3                                                              0 B
most on one core                                                            4.0 KiB
"""
import math
from typing import Any, List, Optional

import tensorflow as tf

from spatial_tf.spec import (Assign, check_num_cores_per_replica, check_order,
                             flatten_with_paths, validate)
from spatial_tf.table import format_bytes, format_table

__all__ = ["summary", "layout_rows", "core_totals"]


def layout_rows(inputs: Any, spec: Any, num_cores_per_replica: int) -> list:
    """One dict per tensor: path, shape, dtype, leaf, shard_shape, bytes_per_core.

    ``bytes_per_core`` is what each core holding the tensor holds (for ``Assign(k)``,
    what core k holds); None when a size is unknown.
    """
    check_order(inputs, spec, "layout_rows")
    tree = validate(inputs, spec, num_cores_per_replica)
    rows = []
    for (path, leaf), (_, x) in zip(
        flatten_with_paths(tree), flatten_with_paths(inputs), strict=True
    ):
        shape = tuple(tf.TensorShape(x.shape).as_list())
        dtype = tf.as_dtype(x.dtype)
        shard = leaf.shard_shape(shape)
        known = None not in shard and dtype != tf.string
        rows.append(
            dict(
                path=path,
                shape=shape,
                dtype=dtype.name,
                leaf=leaf,
                shard_shape=shard,
                bytes_per_core=math.prod(shard) * dtype.size if known else None,
            )
        )
    return rows


def core_totals(rows: list, num_cores_per_replica: int) -> list:
    """Bytes each logical core holds, from ``layout_rows``; None where a size is unknown.

    >>> rows = [dict(leaf=Assign(1), bytes_per_core=8), dict(leaf=None, bytes_per_core=2)]
    >>> core_totals(rows, 2)
    [2, 10]
    """
    totals: List[Optional[int]] = [0] * num_cores_per_replica
    for r in rows:
        cores = [r["leaf"].core] if isinstance(r["leaf"], Assign) else range(len(totals))
        for k in cores:
            if totals[k] is not None:
                totals[k] = None if r["bytes_per_core"] is None else totals[k] + r["bytes_per_core"]
    return totals


def summary(inputs: Any, spec: Any, num_cores_per_replica: int) -> str:
    """Return a text table: path, global shape, dtype, spec, shard shape, bytes per core.

    ``inputs`` may be tensors, ``tf.TensorSpec`` s or a dataset's ``element_spec``. An
    ``Assign(k)`` tensor lives on core k only; its bytes are counted for that core, and
    the totals are then given per core (and the most any one core holds). The spec-first
    order of releases before 0.2 raises ``TypeError`` saying so.
    """
    check_order(inputs, spec, "summary")
    cores = check_num_cores_per_replica(num_cores_per_replica)
    rows = layout_rows(inputs, spec, cores)
    table = []
    for r in rows:
        where = f" (core {r['leaf'].core})" if isinstance(r["leaf"], Assign) else ""
        table.append(
            [r["path"], _shape(r["shape"]), r["dtype"], repr(r["leaf"]),
             _shape(r["shard_shape"]), format_bytes(r["bytes_per_core"]) + where]
        )
    table += [[label, "", "", "", "", format_bytes(b)] for label, b in _total_rows(rows, cores)]
    return format_table(
        ["path", "global shape", "dtype", "spec", "shard shape", "bytes/core"],
        table,
        right=("bytes/core",),
    )


def _total_rows(rows, cores):
    totals = core_totals(rows, cores)
    assigned = sorted({r["leaf"].core for r in rows if isinstance(r["leaf"], Assign)})
    if not assigned:
        return [("total per core", totals[0])]
    out = [(f"total on core {k}", totals[k]) for k in assigned]
    others = [k for k in range(cores) if k not in assigned]
    if others:
        label = "core" if len(others) == 1 else "cores"
        out.append((f"total on {label} {_ranges(others)}", totals[others[0]]))
    known = [t for t in totals if t is not None]
    out.append(("most on one core", max(known) if len(known) == len(totals) else None))
    return out


def _ranges(ids):
    """``[2, 3, 4, 7]`` -> ``'2-4, 7'``."""
    runs = []
    for k in ids:
        if runs and k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _shape(shape):
    return "(" + ", ".join("?" if s is None else str(s) for s in shape) + (",)" if len(shape) == 1 else ")")
