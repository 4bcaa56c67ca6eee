"""Match a spec tree to nested inputs and check every leaf, before any device time.

A spec mirrors the inputs: a dict of specs for a dict of tensors, a list/tuple for a
list/tuple, a namedtuple (or dict of its fields) for a namedtuple. At each tensor the spec
is a leaf (``Tile``, ``PartialTile``, ``Replicate``, ``Assign``) or a TPUEstimator form:

- a list of ints (``[1, 4, 1, 1]``): one split count per axis; product == cores per
  replica gives ``Tile``;
- ``None``: ``Replicate()``; also allowed over a whole sub-structure;
- a list whose product is 1 (``[1]``): TPUEstimator's "core 0 only". TPUStrategy refuses
  device assignment in SPMD mode, so it becomes ``Replicate()`` (see docs/specs.md).

``input_partition_dims=[feature_dims, label_dims]`` is matched to ``(features, labels)``
as is; ``[feature_dims]`` alone replicates the labels.

>>> import tensorflow as tf
>>> features = {"image": tf.TensorSpec([8, 64, 64, 3]), "mask": tf.TensorSpec([8, 64, 64, 1])}
>>> labels = tf.TensorSpec([8])
>>> validate((features, labels), [{"image": [1, 4, 1, 1], "mask": [1, 2, 2, 1]}, None], 4)
({'image': Tile(1, 4, 1, 1), 'mask': Tile(1, 2, 2, 1)}, Replicate())
"""
import collections.abc
import math
from typing import Any, Optional, Tuple

import numpy as np
import tensorflow as tf

from spatial_tf.checks import CORE_COUNTS, check_int
from spatial_tf.spec.leaves import Assign, PartialTile, Replicate, Tile, _Leaf
from spatial_tf.spec.paths import children, flatten_with_paths, is_namedtuple, top_level_names
from spatial_tf.table import plural

__all__ = [
    "validate",
    "parse",
    "check_cores",
    "infer_num_cores",
    "check_num_cores_per_replica",
    "VALID_CORES_PER_REPLICA",
    "MAX_CORES_PER_REPLICA",
]

# TPUConfig's values of num_cores_per_replica: 1, 2, 4, ..., 128 (spatial_tf.checks)
VALID_CORES_PER_REPLICA = CORE_COUNTS
MAX_CORES_PER_REPLICA = CORE_COUNTS[-1]


def check_num_cores_per_replica(n: int, name: str = "num_cores_per_replica") -> int:
    """Return ``n`` as an int if it is one of 1, 2, 4, ..., 128; raise otherwise."""
    n = check_int(n, name, f"{name}=8", minimum=None,
                  expected=f"an int in {list(VALID_CORES_PER_REPLICA)}")
    if n not in VALID_CORES_PER_REPLICA:
        raise ValueError(
            f"{name} is {n}; expected one of {list(VALID_CORES_PER_REPLICA)} "
            f"(a power of two up to {MAX_CORES_PER_REPLICA}, as TPUConfig requires). Fix: "
            f"pick the nearest of these that fits your slice."
        )
    return n


def validate(inputs: Any, spec: Any, num_cores_per_replica: int) -> Any:
    """Return the spec as a tree of leaves shaped like ``inputs``, or raise.

    ``inputs`` may hold tensors, NumPy arrays, ``tf.TensorSpec`` s or be a ``tf.data``
    ``element_spec``. Errors are ``ValueError`` (bad value) or ``TypeError`` (wrong
    type) and start with the path of the offending tensor, e.g. ``features['mask']``.
    Neither argument is modified. The spec-first order of releases before 0.2 raises
    ``TypeError`` saying so.
    """
    check_order(inputs, spec, "validate")
    cores = check_num_cores_per_replica(num_cores_per_replica)
    return check_cores(inputs, parse(inputs, spec), cores)


def parse(inputs: Any, spec: Any) -> Any:
    """Match ``spec`` to ``inputs`` and parse every leaf, without a core count.

    Returns the tree of leaves (``Tile``, ``PartialTile``, ``Replicate``, ``Assign``)
    shaped like ``inputs``: structure, ranks and split counts are checked; whether the
    split counts fit a core count is ``check_cores``' job.

    >>> parse(tf.zeros([2, 16]), np.array([1, 4]))
    Tile(1, 4)
    """
    leaves: list = []
    names = top_level_names(inputs)
    if names is not None and _is_sequence(spec):
        spec = list(spec)
        if len(spec) == 1:  # TPUEstimator: [feature_dims] alone leaves labels replicated
            spec.append(None)
        if len(spec) != 2:
            raise ValueError(
                f"inputs: (features, labels) has 2 elements but the spec has {len(spec)}: "
                f"{_short(spec)}. Expected [feature_dims, label_dims] or [feature_dims]. "
                f"Fix: give one spec for the features and one for the labels."
            )
        for name, s, x in zip(names, spec, inputs):
            _match(s, x, name, leaves)
    else:
        _match(spec, inputs, "inputs", leaves)
    return tf.nest.pack_sequence_as(inputs, leaves)


def infer_num_cores(tree: Any) -> Tuple[int, Optional[str]]:
    """``(cores, source)``: the largest ``Tile`` product in a parsed tree, and where it is.

    ``source`` names the tensor and its leaf, for messages (None when nothing is tiled,
    in which case ``cores`` is 1).

    >>> infer_num_cores({"a": Tile(1, 4), "b": Replicate()})
    (4, "inputs['a'] Tile(1, 4)")
    """
    best, source = 1, None
    for path, leaf in flatten_with_paths(tree):
        if type(leaf) is Tile and leaf.num_splits > best:
            best, source = leaf.num_splits, f"{path} {leaf!r}"
    return best, source


def check_cores(inputs: Any, tree: Any, num_cores_per_replica: int,
                source: Optional[str] = None) -> Any:
    """Check a parsed tree against the core count; return it with ``PartialTile`` s that
    cover every core turned into ``Tile`` s.

    ``source``: where the core count came from when it was inferred, named in messages.
    """
    cores = num_cores_per_replica
    said = "" if source is None else (
        f" (inferred from {source}, the largest split in the spec, as no TPUStrategy, "
        f"Emulator or num_cores_per_replica= gives it)"
    )
    checked = []
    for (path, leaf), (_, x) in zip(
        flatten_with_paths(tree), flatten_with_paths(inputs), strict=True
    ):
        checked.append(_check_leaf(leaf, path, _shape_and_dtype(x, path)[0], cores, said))
    return tf.nest.pack_sequence_as(inputs, checked)


def check_order(inputs: Any, spec: Any, where: str) -> None:
    """Raise ``TypeError`` when the arguments came spec-first (``where(spec, inputs)``,
    the order of releases before 0.2) rather than ``where(inputs, spec)``.

    Inputs hold tensors, ``tf.TypeSpec`` s, arrays or numbers; a spec's items are
    ``None``, leaves, ints and 1-D int arrays. The arguments came spec-first when the
    second holds tensors and the first does not, or only the first looks like a spec.

    >>> check_order([1, 4], tf.zeros([2, 8]), "validate")
    Traceback (most recent call last):
    ...
    TypeError: spatial_tf.validate(spec, inputs, ...): the first argument is a spec ([1, 4]) and the second holds the inputs; the order is validate(inputs, spec, ...), as split(inputs, spec). Fix: swap the first two arguments.
    """
    if _holds_tensors(inputs):
        return
    if _holds_tensors(spec) or (_spec_like(inputs) and not _spec_like(spec)):
        second = "holds the inputs" if _holds_tensors(spec) else "is no spec"
        raise TypeError(
            f"spatial_tf.{where}(spec, inputs, ...): the first argument is a spec "
            f"({_short(inputs)}) and the second {second}; the order is "
            f"{where}(inputs, spec, ...), as split(inputs, spec). Fix: swap the first two "
            f"arguments."
        )


def _holds_tensors(tree):
    return any(
        tf.is_tensor(x) or isinstance(x, (tf.Variable, tf.TypeSpec))
        or (isinstance(x, np.ndarray) and not _spec_like(x))
        for x in tf.nest.flatten(tree)
    )


def looks_like_spec(tree: Any) -> bool:
    """True if every item of ``tree`` is spec-like: ``None``, a leaf, an int, 1-D int dims."""
    return tree is not None and _spec_like(tree)


def _spec_like(tree):
    for x in tf.nest.flatten(tree):
        if isinstance(x, np.ndarray):
            if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
                return False
        elif not (x is None or isinstance(x, (_Leaf, int, np.integer))) or isinstance(x, bool):
            return False
    return True


def _is_sequence(x):
    return isinstance(x, (list, tuple)) and not _is_dims(x)


def _is_dims(x):
    """A flat list/tuple/array of numbers: one tensor's partition dims."""
    if isinstance(x, np.ndarray):
        return x.ndim == 1
    return isinstance(x, (list, tuple)) and not is_namedtuple(x) and all(
        isinstance(d, (int, float, np.number)) for d in x
    ) and len(x) > 0


def _short(x, limit=80):
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- structure matching


def _match(spec, x, path, leaves):
    kids = children(x, path)
    if kids is None:
        shape, dtype = _shape_and_dtype(x, path)
        leaves.append(_parse_leaf(spec, path, shape, dtype))
        return
    if spec is None or isinstance(spec, (Replicate, Assign)):
        leaf = Replicate() if spec is None else spec
        for child_path, child in kids:
            _match(leaf, child, child_path, leaves)
        return
    for child_path, s, child in _pair_children(spec, x, path, kids):
        _match(s, child, child_path, leaves)


def _pair_children(spec, x, path, kids):
    what = _describe_structure(x)
    if isinstance(spec, _Leaf):
        raise TypeError(
            f"{path}: is {what} but the spec is {spec!r}, which describes one tensor. "
            f"Expected a spec with the same structure. Fix: give one spec per tensor "
            f"(None or Replicate() may stand for a whole sub-structure)."
        )
    if isinstance(x, collections.abc.Mapping) or (
        is_namedtuple(x) and isinstance(spec, collections.abc.Mapping)
    ):
        return _pair_mapping(spec, x, path, kids, what)
    if is_namedtuple(x) and is_namedtuple(spec) and type(spec) is not type(x):
        raise TypeError(
            f"{path}: is a {type(x).__name__} but the spec is a {type(spec).__name__}. "
            f"Fix: use the same namedtuple type, a dict of its fields, or a list."
        )
    if _is_dims(spec):
        raise TypeError(
            f"{path}: is {what} but the spec is {_short(list(spec))}, the partition dims "
            f"of a single tensor. Expected one spec per element. Fix: e.g. "
            f"{_example_sequence(len(kids))}."
        )
    if not isinstance(spec, (list, tuple)):
        raise TypeError(
            f"{path}: is {what} but the spec is {_short(spec)} "
            f"({type(spec).__name__}). Expected a list or tuple with one spec per "
            f"element. Fix: e.g. {_example_sequence(len(kids))}."
        )
    if len(spec) != len(kids):
        raise ValueError(
            f"{path}: is {what} with {len(kids)} elements but the spec has "
            f"{len(spec)}: {_short(spec)}. Fix: give exactly one spec per element."
        )
    return [(p, s, c) for (p, c), s in zip(kids, spec)]


def _pair_mapping(spec, x, path, kids, what):
    if not isinstance(spec, collections.abc.Mapping):
        raise TypeError(
            f"{path}: is {what} but the spec is {_short(spec)} ({type(spec).__name__}). "
            f"Expected a dict with the same keys. Fix: e.g. "
            f"{{{', '.join(f'{k!r}: None' for k in _keys(x)[:3])}}}."
        )
    keys, spec_keys = _keys(x), list(spec)
    missing = [k for k in keys if k not in spec]
    extra = [k for k in spec_keys if k not in keys]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {plural(len(missing), 'key')} {', '.join(map(repr, missing))}")
        if extra:
            parts.append(f"{plural(len(extra), 'unknown key')} {', '.join(map(repr, extra))}")
        raise ValueError(
            f"{path}: spec keys do not match the inputs: {'; '.join(parts)}. "
            f"Expected exactly the keys {keys}. Fix: add a spec (None to replicate) for "
            f"each missing key and remove unknown ones."
        )
    return [(p, spec[k], c) for (p, c), k in zip(kids, keys)]


def _keys(x):
    return list(type(x)._fields) if is_namedtuple(x) else sorted(x)


def _describe_structure(x):
    if isinstance(x, collections.abc.Mapping):
        return f"a dict with keys {sorted(x)}"
    return f"a {type(x).__name__}"


def _example_sequence(n):
    items = ["[1, 4, 1, 1]"] + ["None"] * min(n - 1, 2) + ["..."] * (n > 3)
    return "[" + ", ".join(items) + "]"


# ---------------------------------------------------------------- one tensor


_UNSPLITTABLE = (
    tf.RaggedTensor, tf.SparseTensor, tf.RaggedTensorSpec, tf.SparseTensorSpec
)


def _shape_and_dtype(x, path):
    if isinstance(x, _UNSPLITTABLE):
        raise TypeError(
            f"{path}: is a {type(x).__name__}; only dense tensors can be partitioned. "
            f"Fix: make it dense in the input pipeline (.to_tensor() / "
            f"tf.sparse.to_dense) with a static shape."
        )
    if isinstance(x, (tf.TensorSpec, tf.Variable)) or tf.is_tensor(x):
        return tf.TensorShape(x.shape), tf.as_dtype(x.dtype)
    if isinstance(x, (np.ndarray, np.generic, int, float, bool, complex)):
        a = np.asarray(x)
        return tf.TensorShape(a.shape), tf.as_dtype(a.dtype)
    raise TypeError(
        f"{path}: is {_short(x)} ({type(x).__name__}); expected a tensor, NumPy array or "
        f"tf.TensorSpec. Fix: pass tensors, or a dataset's element_spec."
    )


def _check_leaf(leaf, path, shape, cores, said):
    if isinstance(leaf, Replicate):
        return leaf
    if isinstance(leaf, Assign):
        if leaf.core >= cores:
            raise ValueError(
                f"{path}: {leaf!r} names logical core {leaf.core}, but a replica has "
                f"{plural(cores, 'core')} (0..{cores - 1}){said}. Fix: use a core below {cores}."
            )
        return leaf
    return _check_tiling(leaf, path, shape, cores, said)


def _parse_leaf(spec, path, shape, dtype):
    if isinstance(spec, Tile):
        _check_rank(spec.dims, path, shape, spec.dims)
        return spec
    if isinstance(spec, _Leaf):
        return spec
    if spec is None:
        return Replicate()
    if isinstance(spec, (list, tuple, np.ndarray)) and (_is_dims(spec) or len(spec) == 0):
        try:
            dims = Tile(*spec).dims
        except (TypeError, ValueError) as e:
            raise type(e)(f"{path}: partition dims {list(spec)!r}: {e}") from e
        _check_rank(dims, path, shape, spec)
        # TPUEstimator's "core 0 only"; see the module docstring for why it replicates.
        return Replicate() if math.prod(dims) == 1 else Tile(*dims)
    raise TypeError(
        f"{path}: spec is {_short(spec)} ({type(spec).__name__}), but {path} is a "
        f"tensor of shape {shape} ({dtype.name}). Expected a list of ints (one split "
        f"count per axis), None, or Tile/PartialTile/Replicate/Assign. Fix: e.g. "
        f"{_example_dims(shape)}."
    )


def _example_dims(shape):
    rank = shape.rank if shape.rank is not None else 4
    return str([1] * rank)


def _check_rank(dims, path, shape, written):
    if shape.rank is None:
        raise ValueError(
            f"{path}: has unknown rank, so partition dims {list(written)!r} cannot be "
            f"checked. Fix: give the tensor a static rank (tf.ensure_shape in the input "
            f"pipeline)."
        )
    if len(dims) != shape.rank:
        raise ValueError(
            f"{path}: partition dims {list(written)!r} have {len(dims)} entries but the "
            f"tensor has rank {shape.rank} (shape {shape}). Expected one split count per "
            f"axis. Fix: e.g. {_example_dims(shape)} with the axes to split set > 1."
        )


def _ensure_shape_example(shape, axis):
    """``shape`` as ``tf.ensure_shape``'s argument, ``SIZE`` at ``axis``.

    >>> _ensure_shape_example(tf.TensorShape([None, None, 64, 3]), 1)
    '[None, SIZE, 64, 3]'
    """
    sizes = ["SIZE" if i == axis else str(s) for i, s in enumerate(shape.as_list())]
    return "[" + ", ".join(sizes) + "]"


def _check_tiling(leaf, path, shape, cores, said):
    n = leaf.num_splits
    if isinstance(leaf, PartialTile):
        if cores % n:
            raise ValueError(
                f"{path}: {leaf!r} splits into {n} pieces, which does not divide "
                f"num_cores_per_replica={cores}{said}. Expected a product dividing {cores}. "
                f"Fix: choose split counts whose product divides {cores}."
            )
        if n == cores:
            leaf = Tile(*leaf.dims)
    elif n != cores:
        hint = (
            "Replicate() (or None) to copy it to every core"
            if n == 1
            else f"PartialTile{leaf.dims} to split it {n} ways and replicate each piece"
            if cores % n == 0
            else f"split counts whose product is {cores}"
        )
        raise ValueError(
            f"{path}: partition dims {list(leaf.dims)} have product {n}, but "
            f"num_cores_per_replica is {cores}{said}. Expected a product of 1 (replicate) or "
            f"{cores} (one piece per core). Fix: use {hint}."
        )
    for axis, (size, d) in enumerate(zip(shape.as_list(), leaf.dims)):
        if d == 1:
            continue
        if size is None and axis == 0:
            raise ValueError(
                f"{path}: axis 0 (the batch axis) is split {d} ways but its size is unknown "
                f"(shape {shape}). Expected a static batch size divisible by {d}. Fix: "
                f"batch with dataset.batch(n, drop_remainder=True), n a multiple of {d}."
            )
        if size is None:
            raise ValueError(
                f"{path}: axis {axis} is split {d} ways but its size is unknown (shape "
                f"{shape}). Expected a static size divisible by {d}. Fix: give axis {axis} a "
                f"fixed size in the input pipeline: a fixed-size crop or resize "
                f"(tf.image.resize_with_crop_or_pad, tf.image.resize), or "
                f"tf.ensure_shape(x, {_ensure_shape_example(shape, axis)}) with SIZE a "
                f"multiple of {d} when every element has that size."
            )
        if size % d:
            lower, upper = size - size % d, size + d - size % d
            raise ValueError(
                f"{path}: axis {axis} has size {size}, which is not divisible by its "
                f"split count {d} (shape {shape}, dims {list(leaf.dims)}). Fix: pad or "
                f"crop axis {axis} to a multiple of {d} (e.g. {lower} or {upper}), or "
                f"split it by a divisor of {size}."
            )
    return leaf
