"""The two parts of a step whose ``tf.summary`` writes were cut out (``summary_graph``).

A ``Split`` holds them as ``GraphDef`` s: ``program`` imports the device part into the
``tf.function(jit_compile=True)`` XLA compiles (the step without its summary ops,
returning their numeric inputs, the *transfers*, after its own results); ``host_function``
imports the host part, which computes every write's tag, value, step and metadata from
the transfers, as ``tf.compat.v1.wrap_function`` documents for a ``GraphDef``. Each
``Write`` says where those values are among the host part's results and which writer
they go to.

>>> import tensorflow as tf
>>> writer = tf.summary.create_file_writer("ram://summary_parts_doctest")
>>> handle(writer).dtype
tf.resource
"""
import dataclasses
from typing import Any, Dict, List, Optional

import tensorflow as tf

__all__ = ["Split", "Write", "handle", "INPUT", "node_name", "inputs_used"]

INPUT = "spatial_tf_summary_input_{}"  # host placeholders, one per transfer


def node_name(ref):
    """``'name'`` of a ``GraphDef`` input: ``'name:0'``, ``'^name'`` or ``'name'``."""
    return ref.lstrip("^").split(":")[0]


def inputs_used(graph_def):
    """Names of the nodes the nodes of ``graph_def`` take inputs from."""
    return {node_name(i) for n in graph_def.node for i in n.input}


def handle(writer):
    """The resource handle of a summary writer, as a function using it captures it."""
    def flush():
        writer.flush()

    return tf.function(flush).get_concrete_function().captured_inputs[0]


@dataclasses.dataclass
class Write:
    """One ``tf.summary.write`` of the step, as the host writes it.

    ``writer``: the handle of a writer the step made default itself, or None for the one
    default where the step runs. ``tag``, ``value``, ``step``, ``metadata``: indices of
    those among the host function's results, and ``flag`` of whether the write's cond
    recorded (None: the write was unconditional). ``host_step``: no step was given nor
    set while tracing; the host's default step is used. ``flushed``: the step flushed
    ``writer`` afterwards.
    """

    writer: Any
    tag: int
    value: int
    step: int
    metadata: int
    flag: Optional[int] = None
    host_step: bool = False
    flushed: bool = False


@dataclasses.dataclass
class Split:
    """A traced step cut at its summary writes. ``transfers``: the ``tf.TensorSpec`` of
    each extra result of the program; ``outputs``: the device part's tensors the program
    returns (the step's own, then the transfers)."""

    device: Any  # GraphDef
    arguments: List[str]  # the step's argument placeholders, in order
    captures: Dict[str, Any]  # capture placeholders the device part uses -> values
    outputs: List[str]
    transfers: List[Any]
    host: Any  # GraphDef
    fetches: List[str]
    writes: List[Write]

    def program(self, num_args):
        """The step without its summary ops: a ``tf.function(jit_compile=True)`` of
        ``num_args`` tensors. Captured values are captured again in the traced order,
        and every op keeps its name (the HLO's op names are the traced step's)."""
        device, arguments, captures, outputs = (self.device, self.arguments,
                                                self.captures, self.outputs)
        used = inputs_used(device) | {node_name(o) for o in outputs}

        def step(*spatial_tf_inputs):
            mapped = {n: t for n, t in zip(arguments, spatial_tf_inputs[:num_args])
                      if n in used}
            for name, value in captures.items():
                mapped[name] = tf.identity(value, name="spatial_tf_capture")
            imported = iter(tf.graph_util.import_graph_def(
                device, input_map={f"{n}:0": t for n, t in mapped.items()},
                return_elements=[o for o in outputs if node_name(o) not in mapped],
                name="") or ())
            return [mapped[node_name(o)] if node_name(o) in mapped else next(imported)
                    for o in outputs]

        return tf.function(step, jit_compile=True, autograph=False)

    def host_function(self):
        """A function of the transfers returning the values ``writes`` index."""
        host = self.host

        def imports():
            tf.graph_util.import_graph_def(host, name="")

        wrapped = tf.compat.v1.wrap_function(imports, [])
        used = [i for i in range(len(self.transfers))
                if INPUT.format(i) in inputs_used(host)]
        function = wrapped.prune(
            [wrapped.graph.get_tensor_by_name(f"{INPUT.format(i)}:0") for i in used],
            [wrapped.graph.get_tensor_by_name(f) for f in self.fetches])
        return lambda *transfers: function(*[tf.convert_to_tensor(transfers[i]) for i in used])
