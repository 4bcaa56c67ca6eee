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

__all__ = ["Split", "Write", "HostRun", "handle", "INPUT", "node_name", "inputs_used",
           "ancestors"]

INPUT = "spatial_tf_summary_input_{}"  # host placeholders, one per transfer


# stands in the traced step for a record_if condition of an outer tf.function
OUTER_CONDITION = "spatial_tf_outer_record_if"


def depends_on_outer_condition(tensor):
    """Whether ``tensor`` is computed from the ``OUTER_CONDITION`` stand-in."""
    seen, todo = set(), [tensor.op]
    while todo:
        op = todo.pop()
        if op.name.startswith(OUTER_CONDITION):
            return True
        if op.name not in seen:
            seen.add(op.name)
            todo.extend(i.op for i in op.inputs)
    return False


def node_name(ref):
    """``'name'`` of a ``GraphDef`` input: ``'name:0'``, ``'^name'`` or ``'name'``."""
    return ref.lstrip("^").split(":")[0]


def inputs_used(graph_def):
    """Names of the nodes the nodes of ``graph_def`` take inputs from."""
    return {node_name(i) for n in graph_def.node for i in n.input}


def ancestors(graph_def, names):
    """Names of the nodes of ``graph_def`` that ``names`` (node names) need, themselves
    included (through data and control inputs)."""
    nodes = {n.name: n for n in graph_def.node}
    found, stack = set(), list(names)
    while stack:
        name = stack.pop()
        if name in found or name not in nodes:
            continue
        found.add(name)
        stack.extend(node_name(i) for i in nodes[name].input)
    return found


def handle(writer):
    """The resource handle of a summary writer, as a function using it captures it."""
    def flush():
        writer.flush()

    return tf.function(flush).get_concrete_function().captured_inputs[0]


@dataclasses.dataclass
class Write:
    """One summary write of the step, as the host writes it: a ``tf.summary.write``
    (``op`` ``WriteSummary``), or one of TensorFlow's other write ops
    (``WriteScalarSummary``, ``WriteHistogramSummary``, ``WriteImageSummary``,
    ``WriteAudioSummary``, ``WriteRawProtoSummary``, ``WriteGraphSummary``,
    ``ImportEvent``), run again on the host with ``args`` (input name -> index among the
    host function's results) and ``attrs`` (its non-type attributes).

    ``writer``: the handle of a writer the step made default itself, or None for the one
    default where the step runs. ``tag``, ``value``, ``step``, ``metadata``: indices of
    those among the host function's results, and ``flag`` of whether the write's cond
    recorded (None: the write was unconditional). ``host_step``: no step was given nor
    set while tracing; the host's default step is used. ``flushed``: the step flushed
    ``writer`` afterwards.
    """

    writer: Any
    tag: Optional[int]
    value: Optional[int]
    step: Optional[int]
    metadata: Optional[int]
    flag: Optional[int] = None
    host_step: bool = False
    # ``flag`` holds the record_if condition where the step runs (``OUTER_CONDITION``)
    outer: bool = False
    flushed: bool = False
    op: str = "WriteSummary"
    args: Dict[str, int] = dataclasses.field(default_factory=dict)
    attrs: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def flushes(self):
        """The writers to flush after this write (the step's own, flushed in the step)."""
        return [self.writer] if self.flushed and self.writer is not None else []


@dataclasses.dataclass
class HostRun:
    """A cond, loop or nested function of the step holding summary ops, run as it is
    by TensorFlow on the host after the step (TPUStrategy runs such summary ops on the
    host where they stand): the host part's node ``op`` and its functions, fed with the
    transfers (its inputs, the variables it reads as they were where it stood) and
    the writers it writes to. ``writers``: ``(placeholder, handle)`` pairs, the handle
    None for the writer default where the step runs; ``done``: the host tensor that
    follows the op; ``flushed``: the step's own writers flushed after it in the step.
    """

    op: str
    construct: str
    done: str
    writers: List[Any]
    flushed: List[Any] = dataclasses.field(default_factory=list)
    writer: Any = None
    host_step: bool = False

    def flushes(self):
        return list(self.flushed)


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
    writes: List[Any]  # Write and HostRun, in the step's order
    # traced inside an outer tf.function under record_if(a tensor of it): writes to a
    # writer the step enters record only when that condition holds where the step runs
    outer_condition: bool = False

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

    def _wrapped(self):
        if "wrapped" not in self.__dict__:
            host = self.host

            def imports():
                tf.graph_util.import_graph_def(host, name="")

            self.__dict__["wrapped"] = tf.compat.v1.wrap_function(imports, [])
        return self.__dict__["wrapped"]

    def host_function(self):
        """A function of the transfers returning the values ``writes`` index."""
        wrapped = self._wrapped()
        needed = ancestors(self.host, [node_name(f) for f in self.fetches])
        used = [i for i in range(len(self.transfers)) if INPUT.format(i) in needed]
        function = wrapped.prune(
            [wrapped.graph.get_tensor_by_name(f"{INPUT.format(i)}:0") for i in used],
            [wrapped.graph.get_tensor_by_name(f) for f in self.fetches])
        return lambda *transfers: function(*[tf.convert_to_tensor(transfers[i]) for i in used])

    def host_run(self, run):
        """A function of the transfers and the writers' handles (one per
        ``run.writers``) that runs ``run`` (a ``HostRun``) on the host."""
        wrapped = self._wrapped()
        needed = ancestors(self.host, [node_name(run.done)])
        used = [i for i in range(len(self.transfers)) if INPUT.format(i) in needed]
        feeds = [wrapped.graph.get_tensor_by_name(f"{INPUT.format(i)}:0") for i in used]
        feeds += [wrapped.graph.get_tensor_by_name(f"{p}:0") for p, _ in run.writers]
        function = wrapped.prune(feeds, [wrapped.graph.get_tensor_by_name(run.done)])
        return lambda transfers, handles: function(
            *[tf.convert_to_tensor(transfers[i]) for i in used], *handles)
