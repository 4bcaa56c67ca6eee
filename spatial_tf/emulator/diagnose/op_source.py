"""The TensorFlow op behind an XLA instruction, and the line of the user's code that made it.

XLA keeps each instruction's TensorFlow op name (``metadata.op_name``); the traced graph
keeps each op and the Python stack it was created from (``op.traceback``). A gradient op
(``gradient_tape/model/conv/Conv2D/Conv2DBackpropFilter``) is traced back to the forward
op it differentiates (``model/conv/Conv2D``), whose line is the one the user wrote.

>>> import tensorflow as tf
>>> @tf.function
... def step(x):
...     return tf.reshape(x, [-1])
>>> graph = step.get_concrete_function(tf.TensorSpec([2, 3])).graph
>>> source = find(graph, "Reshape")
>>> source.op.type, source.gradient, source.frame.name
('Reshape', False, 'step')
"""
import dataclasses
import functools
import importlib.util
import linecache
import os
import re
import site
import sysconfig
from typing import Any, Optional

from spatial_tf._tf_internals import function_graph
from spatial_tf.frames import is_excluded

__all__ = ["Source", "find", "user_frame"]

GRADIENT_PREFIX = "gradient_tape/"


@dataclasses.dataclass(frozen=True)
class Source:
    """Where an XLA instruction comes from.

    Attributes:
      op: the forward TensorFlow op (for a gradient op, the op it differentiates).
      gradient: whether the instruction belongs to ``op`` 's gradient (False when ``op`` is
        itself a gradient op, named ``gradient_tape/...``).
      frame: the innermost stack frame of the user's code that created ``op``, or None.
    """

    op: Any
    gradient: bool
    frame: Any

    def where(self) -> str:
        """``"file.py:12 in call: `y = tf.reshape(x, [-1])`"``, or ``""`` without a frame."""
        if self.frame is None:
            return ""
        line = (self.frame.line or linecache.getline(self.frame.filename,
                                                     self.frame.lineno)).strip()
        text = f"{os.path.basename(self.frame.filename)}:{self.frame.lineno} in {self.frame.name}"
        if len(line) > 80:
            line = line[:77] + "..."
        return f"{text}: `{line}`" if line else text


def find(graph, op_name: str) -> Optional[Source]:
    """The ``Source`` of ``op_name`` in ``graph``, or None when the graph has no such op.

    A gradient op whose forward op cannot be told (none, or several alike, in its scope)
    is its own source: its line is the ``tape.gradient`` call.
    """
    op = _op(graph, op_name) if op_name and graph is not None else None
    if op is None:
        return None
    if op_name.startswith(GRADIENT_PREFIX):
        forward = _forward_op(graph, op_name[len(GRADIENT_PREFIX):], _forward_type(op.type))
        if forward is not None:
            return Source(op=forward, gradient=True, frame=user_frame(forward))
    return Source(op=op, gradient=False, frame=user_frame(op))


def _forward_type(gradient_type):
    """``Conv2DBackpropFilter`` -> ``Conv2D``, ``FusedBatchNormGradV3`` -> ``FusedBatchNorm``."""
    return re.sub(r"(Backprop(Filter|Input)|Grad)(V\d)?$", "", gradient_type)


def _forward_op(graph, name, forward_type):
    """The op of ``forward_type`` whose scope holds the gradient op ``name`` (without the
    ``gradient_tape/`` prefix): the scope itself (Keras names an op after its scope) or
    the only such op directly in it, trying the innermost scope first."""
    parts = name.split("/")
    for end in range(len(parts) - 1, 0, -1):
        scope = "/".join(parts[:end])
        op = _op(graph, scope)
        if op is not None and op.type.startswith(forward_type):
            return op
        inside = [o for o in graph.get_operations()
                  if o.type.startswith(forward_type) and o.name.rpartition("/")[0] == scope]
        if len(inside) == 1:
            return inside[0]
        if inside:
            return None
    return None


_CALLS = ("PartitionedCall", "StatefulPartitionedCall")


def _op(graph, name):
    """The op ``name`` of ``graph``, or of the nested ``tf.function`` its scope calls:
    XLA names an op inside a called function ``<call op>/<op in the function>``
    (``model/StatefulPartitionedCall/Conv3D``), and the op, with the user's line in its
    traceback, lives in that function's graph."""
    try:
        return graph.get_operation_by_name(name)
    except (KeyError, ValueError):
        pass
    parts = name.split("/")
    for end in range(len(parts) - 1, 0, -1):
        try:
            call = graph.get_operation_by_name("/".join(parts[:end]))
        except (KeyError, ValueError):
            continue
        if call.type in _CALLS:
            inner = function_graph(graph, call.get_attr("f").name)
            return None if inner is None else _op(inner, "/".join(parts[end:]))
    return None


def user_frame(op):
    """The innermost frame of ``op.traceback`` in the user's own code, or None.

    Frames in TensorFlow, Keras, the standard library and spatial_tf's own plumbing (the
    modules that declared themselves with ``spatial_tf.frames.register_exclusion``) are
    never it; frames in other installed packages (``site-packages``: einops, a model
    zoo) are passed over for the user's line that called them, and taken only when no
    frame outside installed packages is left.
    """
    library = _library_paths()
    frames = [frame for frame in reversed(list(op.traceback))
              if not frame.filename.startswith(library) and "<frozen" not in frame.filename
              and not is_excluded(frame.filename)]
    installed = _installed_paths()
    own = next((frame for frame in frames if not frame.filename.startswith(installed)), None)
    return own or (frames[0] if frames else None)


@functools.lru_cache(maxsize=None)
def _installed_paths():
    """The folders pip installs packages into (``site-packages``, ``dist-packages``)."""
    paths = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    try:
        paths.update(site.getsitepackages())
        paths.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    return tuple(os.path.join(p, "") for p in sorted(paths))


@functools.lru_cache(maxsize=None)
def _library_paths():
    """TensorFlow's, Keras', absl's and the standard library's folders."""
    paths = [sysconfig.get_paths()["stdlib"] + os.sep]
    for name in ("tensorflow", "keras", "tf_keras", "keras_hub", "absl"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            paths += [os.path.join(p, "") for p in spec.submodule_search_locations]
    return tuple(paths)
