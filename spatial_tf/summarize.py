"""A table of how each input tensor is laid out over the cores of a replica.

>>> import tensorflow as tf
>>> print(summary({"image": [1, 2, 2, 1], "label": None},
...               {"image": tf.TensorSpec([8, 256, 256, 3]), "label": tf.TensorSpec([8], tf.int32)},
...               num_cores_per_replica=4))
path             global shape      dtype    spec              shard shape       bytes/core
---------------  ----------------  -------  ----------------  ----------------  ----------
inputs['image']  (8, 256, 256, 3)  float32  Tile(1, 2, 2, 1)  (8, 128, 128, 3)     1.5 MiB
inputs['label']  (8,)              int32    Replicate()       (8,)                    32 B
total per core                                                                     1.5 MiB
"""
import math

import tensorflow as tf

from spatial_tf.spec import Assign, validate
from spatial_tf.spec.paths import flatten_with_paths
from spatial_tf.table import format_bytes, format_table

__all__ = ["summary", "layout_rows"]


def layout_rows(spec, inputs, num_cores_per_replica):
    """One dict per tensor: path, shape, dtype, leaf, shard_shape, bytes_per_core."""
    tree = validate(spec, inputs, num_cores_per_replica)
    rows = []
    for (path, leaf), (_, x) in zip(flatten_with_paths(tree), flatten_with_paths(inputs)):
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


def summary(spec, inputs, num_cores_per_replica):
    """Return a text table: path, global shape, dtype, spec, shard shape, bytes per core.

    ``inputs`` may be tensors, ``tf.TensorSpec`` s or a dataset's ``element_spec``. An
    ``Assign(k)`` tensor lives on core k only; its bytes are counted for that core.
    """
    rows = layout_rows(spec, inputs, num_cores_per_replica)
    table = []
    for r in rows:
        where = f" (core {r['leaf'].core})" if isinstance(r["leaf"], Assign) else ""
        table.append(
            [r["path"], _shape(r["shape"]), r["dtype"], repr(r["leaf"]),
             _shape(r["shard_shape"]), format_bytes(r["bytes_per_core"]) + where]
        )
    sizes = [r["bytes_per_core"] for r in rows]
    total = None if None in sizes else sum(sizes)
    table.append(["total per core", "", "", "", "", format_bytes(total)])
    return format_table(
        ["path", "global shape", "dtype", "spec", "shard shape", "bytes/core"],
        table,
        right=("bytes/core",),
    )


def _shape(shape):
    return "(" + ", ".join("?" if s is None else str(s) for s in shape) + (",)" if len(shape) == 1 else ")")
