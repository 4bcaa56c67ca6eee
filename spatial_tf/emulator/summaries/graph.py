"""A traced step's ``tf.summary`` writes cut out of its graph: a device and a host part.

The step is traced with a summary writer made default (``writes.default_writer``), so
``tf.summary.write`` builds TensorFlow's own ops in the graph: a ``WriteSummary``, or,
when whether to record is decided at run time (``tf.summary.record_if`` with a tensor,
or a replica context's "replica 0 only"), an ``If`` whose true branch holds it; and a
``FlushSummaryWriter`` where a writer made default inside the step is left. ``split``
finds those ops by type in the graph's ``GraphDef`` and returns a
``parts.Split``:

- the device part: the graph with each write and flush replaced by a ``NoOp`` of the
  same name (a cond by ``Identity(condition)``, after reading the variables its branch
  read), so control edges and the rest of the step stay as they were; its extra results
  (the *transfers*) are the numeric inputs of the summaries: steps, values, conditions;
- the host part: what must run outside XLA (string ops such as ``EncodePng``, each cond
  with its branch rewritten by ``summary_branch``), computed from the transfers.

Ops keep their names, so messages about the program's ops point at the step's lines.

>>> import tensorflow as tf
>>> from spatial_tf.emulator.summaries.parts import handle
>>> writer = tf.summary.create_file_writer("ram://summary_graph_doctest")
>>> def step(x):
...     with writer.as_default(step=3):
...         tf.summary.scalar("loss", tf.reduce_sum(x))
...     return x * 2.0
>>> concrete = tf.function(step).get_concrete_function(tf.TensorSpec([2]))
>>> cut = split(concrete.graph, concrete.outputs, None, host_step=-1)
>>> [(w.writer is handle(writer), w.flushed) for w in cut.writes], len(cut.transfers)
([(True, True)], 2)
>>> program = cut.program(1)  # the step without its write and flush, XLA-compilable
>>> [t.numpy().tolist() for t in program(tf.ones([2]))]  # x * 2, then the value and step
[[2.0, 2.0], 2.0, 3]
"""
from typing import Any, List

import tensorflow as tf

from spatial_tf.emulator.compile.errors import CompileError
from spatial_tf.emulator.compile.handles import HandleVariable
from spatial_tf.emulator.summaries.branch import empty_branch, host_branch
from spatial_tf.emulator.summaries.parts import INPUT, Split, Write, inputs_used, node_name

__all__ = ["split", "SUMMARY_OPS"]

WRITE, FLUSH = "WriteSummary", "FlushSummaryWriter"
# summary ops the emulator does not move to the host (tf.compat.v1/contrib-style writes,
# writers created or closed inside the step)
UNSUPPORTED = frozenset({
    "WriteScalarSummary", "WriteHistogramSummary", "WriteImageSummary",
    "WriteAudioSummary", "WriteRawProtoSummary", "WriteGraphSummary", "ImportEvent",
    "SummaryWriter", "CreateSummaryFileWriter", "CreateSummaryDbWriter",
    "CloseSummaryWriter",
})
SUMMARY_OPS = UNSUPPORTED | {WRITE, FLUSH}
_CONDS = ("If", "StatelessIf")
_FETCH = "spatial_tf_summary_fetch_{}"  # host results, one per written value


def split(graph, outputs, trace_writer, host_step, arguments=None, name=None):
    """Cut the summary writes out of ``graph`` (a traced ``FuncGraph``); None if it has none.

    ``outputs``: its output tensors; ``trace_writer``: None, or a function returning the
    handle of the writer the step was traced with (writes to it go to the writer
    default where the step runs, writes to any other writer to that one);
    ``host_step``: the default step set while tracing when none was (writes with it take
    the host's default step). ``arguments``: how many of ``graph.inputs`` are the step's
    arguments (default: all that are not captures); ``name``: the step's, for messages.

    Raises:
      CompileError: a summary op the host cannot write for the step (inside a loop or
        a nested function, a writer created or closed in the step).
    """
    captures = {internal.op.name: external for external, internal in graph.captures}
    if not _may_write(graph, captures):
        return None
    graph_def = graph.as_graph_def()
    cut = _Cut(graph, graph_def, captures, trace_writer() if trace_writer else None,
               host_step, name or graph.name)
    if not cut.replaced:
        return None
    if arguments is None:
        arguments = len(graph.inputs) - len(captures)
    transfers = [t if isinstance(t, str) else f"{t.op.name}:{t.value_index}"
                 for t in cut.transfers]
    specs = [cut.spec(t) for t in cut.transfers]
    while len(specs) % 2 or (cut.writes and not specs):  # read in pairs, one at least
        transfers.append(cut.pad())
        specs.append(tf.TensorSpec([], tf.int32))
    roots = [t.op.name for t in outputs] + [op.name for op in graph.control_outputs]
    device = cut.device(roots + [node_name(t) for t in transfers])
    used = inputs_used(device) | {node_name(t) for t in transfers}
    return Split(
        device=device,
        arguments=[t.op.name for t in graph.inputs[:arguments]],
        captures={n: v for n, v in captures.items() if n in used},
        outputs=[f"{t.op.name}:{t.value_index}" for t in outputs] + transfers,
        transfers=specs, host=cut.host_graph(), fetches=cut.fetches, writes=cut.writes,
    )


def _may_write(graph, captures):
    """A writer can only reach the step as a captured resource that is no variable."""
    variables = {id(v.handle) for v in graph.variables}
    return any(
        t.dtype == tf.resource and id(t) not in variables and not _is_variable(t)
        for t in captures.values()
    ) or any(op.type in SUMMARY_OPS for op in graph.get_operations())


def _is_variable(t):
    try:
        return HandleVariable.from_handle(t) is not None
    except (AttributeError, TypeError, ValueError):
        return False


def _called(node_def, library):
    """Names of the library functions ``node_def`` calls (its op or its func attrs)."""
    names = [node_def.op] if node_def.op in library else []
    for value in node_def.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names += [f.name for f in value.list.func]
    return names


def _unsupported(function, op_type, op_name, problem, fix):
    return CompileError.for_op(function, op_type, op_name, problem, fix)


class _Cut:
    """Builds the device and host parts of one traced graph (see ``split``)."""

    def __init__(self, graph, graph_def, captures, trace_writer, host_step, name):
        self.graph, self.captures, self.name = graph, captures, name
        self.trace_writer, self.host_step = trace_writer, host_step
        self.nodes = {n.name: n for n in graph_def.node}
        self.graph_def = graph_def
        self.library = {f.signature.name: f for f in graph_def.library.function}
        self._writes_in = {}
        self.replaced = {}  # device node name -> NodeDef standing for a summary op
        self.extra = []  # device nodes added (variables a cond's branch read)
        self.transfers, self._transfer_index = [], {}
        self.host_nodes, self.host_functions = {}, {}
        self.fetches: List[Any] = []
        self.writes: List[Any] = []
        self._read_specs = {}
        flushed = []
        for op in graph.get_operations():
            node = self.nodes[op.name]
            if op.type == WRITE:
                self._write(op)
            elif op.type == FLUSH:
                flushed.append(self._writer(op.inputs[0], op))
                self.replaced[op.name] = _no_op(node)
            elif op.type in UNSUPPORTED:
                raise _unsupported(
                    self.name, op.type, op.name, "is a summary op the emulator cannot run "
                    "on the host after the step (it moves tf.summary.write, scalar, "
                    "histogram, image, text and audio, and flushes)",
                    "create and close summary writers outside the step, and write with "
                    "tf.summary.* (TensorFlow 2) calls inside it")
            elif op.type in _CONDS and self._has(node.attr["then_branch"].func.name, WRITE,
                                                 direct=True):
                self._cond(op, node)
            elif any(self._has(f) for f in _called(node, self.library)):
                raise _unsupported(
                    self.name, op.type, op.name, "holds a tf.summary call inside a loop, a "
                    "tf.cond or a nested tf.function; the emulator writes the step's "
                    "summaries on the host after it ran and reaches them only at the "
                    "step's top level",
                    "call tf.summary.* at the top level of the step (decide whether to "
                    "record with tf.summary.record_if(condition) around it, which works)")
        for w in self.writes:
            w.flushed = any(w.writer is f for f in flushed if f is not None)

    # ------------------------------------------------------------ what is where

    def _has(self, function, types=SUMMARY_OPS, direct=False):
        """True if library ``function`` (or, unless ``direct``, one it calls) has an op of
        ``types``."""
        types = {types} if isinstance(types, str) else types
        key = (function, frozenset(types), direct)
        if key not in self._writes_in:
            self._writes_in[key] = False  # recursion guard
            nodes = self.library[function].node_def if function in self.library else []
            self._writes_in[key] = any(n.op in types for n in nodes) or (not direct and any(
                self._has(f, types) for n in nodes for f in _called(n, self.library)))
        return self._writes_in[key]

    def _writer(self, tensor, op):
        """The captured writer ``tensor`` is: None for the trace's, else its handle."""
        value = self.captures.get(tensor.op.name)
        if value is None or tensor.op.type != "Placeholder":
            raise _unsupported(
                self.name, op.type, op.name, "writes to a summary writer created inside "
                "the step", "create the writer (tf.summary.create_file_writer) outside the "
                "step; entering it with writer.as_default() inside the step works")
        return None if value is self.trace_writer else value

    def spec(self, transfer):
        if isinstance(transfer, str):
            return self._read_specs[transfer]
        return tf.TensorSpec(transfer.shape, transfer.dtype)

    def _transfer(self, tensor):
        """The host placeholder that receives ``tensor`` (a result of the program)."""
        key = tensor if isinstance(tensor, str) else tensor.name
        if key not in self._transfer_index:
            self._transfer_index[key] = len(self.transfers)
            self.transfers.append(tensor)
            node = tf.compat.v1.NodeDef(name=INPUT.format(self._transfer_index[key]),
                                        op="Placeholder")
            node.attr["dtype"].type = self.spec(tensor).dtype.as_datatype_enum
            self.host_nodes[node.name] = node
        return f"{INPUT.format(self._transfer_index[key])}:0"

    def _host_value(self, tensor, op):
        """A host reference computing ``tensor``: strings on the host, the rest transferred."""
        if tensor.dtype == tf.resource:
            raise _unsupported(
                self.name, op.type, op.name, "needs the resource "
                f"'{tensor.name}' to write a summary", "compute the summary's value as a "
                "tensor in the step")
        if tensor.dtype != tf.string:
            return self._transfer(tensor)
        self._copy(tensor.op)
        return f"{tensor.op.name}:{tensor.value_index}"

    def _copy(self, op):
        if op.name in self.host_nodes:
            return
        if op.name in self.captures:  # a string the step captured: a host constant
            value = self.captures[op.name]
            if not hasattr(value, "numpy"):
                raise TypeError(
                    f"{self.name}: a tf.summary call in the step uses the string tensor "
                    f"{value!r} from an enclosing tf.function; the emulator compiles the "
                    f"step on its own and cannot see it. Fix: pass it to strategy.run "
                    f"through args, or make it in the step.")
            node = tf.compat.v1.NodeDef(name=op.name, op="Const")
            node.attr["dtype"].type = tf.string.as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value.numpy()))
            self.host_nodes[op.name] = node
            return
        node = tf.compat.v1.NodeDef()
        node.CopyFrom(self.nodes[op.name])
        del node.input[:]
        self.host_nodes[op.name] = node
        node.input.extend(self._host_value(t, op) for t in op.inputs)
        for f in _called(node, self.library):
            self._host_library(f)

    def _host_library(self, function):
        if function in self.host_functions or function not in self.library:
            return
        self.host_functions[function] = self.library[function]
        for n in self.library[function].node_def:
            for f in _called(n, self.library):
                self._host_library(f)

    def _fetch(self, ref, dtype):
        node = tf.compat.v1.NodeDef(name=_FETCH.format(len(self.fetches)), op="Identity",
                                    input=[ref])
        node.attr["T"].type = dtype.as_datatype_enum
        self.host_nodes[node.name] = node
        self.fetches.append(f"{node.name}:0")
        return len(self.fetches) - 1

    def _is_host_step(self, node_def):
        return node_def.op == "Const" and node_def.attr["dtype"].type == tf.int64 and \
            tf.make_ndarray(node_def.attr["value"].tensor).tolist() == self.host_step

    # ------------------------------------------------------------ writes

    def _write(self, op):
        """A write at the step's top level: its step and value computed in the program."""
        writer, step, value, tag, metadata = op.inputs
        host_step = self._is_host_step(self.nodes[step.op.name])
        self.writes.append(Write(
            writer=self._writer(writer, op),
            tag=self._fetch(self._host_value(tag, op), tf.string),
            value=self._fetch(self._host_value(value, op), value.dtype),
            step=self._fetch(self._transfer(step) if not host_step else
                             self._const_step(), tf.int64),
            metadata=self._fetch(self._host_value(metadata, op), tf.string),
            host_step=host_step,
        ))
        self.replaced[op.name] = _no_op(self.nodes[op.name])

    def _const_step(self):
        name = "spatial_tf_summary_host_step"
        if name not in self.host_nodes:
            node = tf.compat.v1.NodeDef(name=name, op="Const")
            node.attr["dtype"].type = tf.int64.as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(self.host_step, tf.int64))
            self.host_nodes[name] = node
        return f"{name}:0"

    def _cond(self, op, node):
        """A write under a condition known when the step runs: the condition and the
        branch's inputs are transferred, variables the branch reads are read in the
        program where the cond stood, and the branch runs on the host without its
        write."""
        then = self.library[node.attr["then_branch"].func.name]
        self._check_cond(op, node, then)
        host_inputs, host_types, writers, reads = self._cond_inputs(op, then)
        device_reads = self._device_reads(op, node, reads, host_inputs, host_types)
        branch, writes = host_branch(then, [r for r, _ in reads], self.host_step)
        self._host_cond(op, branch, host_inputs, host_types)
        for k, (write, host_step) in enumerate(writes):
            first = 1 + 4 * k
            self.writes.append(Write(
                writer=writers.get(write.input[0]),
                tag=self._fetch(f"{op.name}:{first}", tf.string),
                value=self._fetch(f"{op.name}:{first + 1}", tf.as_dtype(write.attr["T"].type)),
                step=self._fetch(f"{op.name}:{first + 2}", tf.int64),
                metadata=self._fetch(f"{op.name}:{first + 3}", tf.string),
                flag=self._fetch(f"{op.name}:0", tf.bool), host_step=host_step,
            ))
        # in the program: the cond's outcome is its condition; reads keep their place
        stand_in = tf.compat.v1.NodeDef(name=op.name, op="Identity",
                                        input=[node.input[0]])
        stand_in.input.extend(i for i in node.input if i.startswith("^"))
        stand_in.input.extend(f"^{r}" for r in device_reads)
        stand_in.attr["T"].type = tf.bool.as_datatype_enum
        self.replaced[op.name] = stand_in

    def _check_cond(self, op, node, then):
        """Refuse a cond whose other branch, or a function it calls, writes too."""
        if self._has(node.attr["else_branch"].func.name) or any(
                n.op in SUMMARY_OPS - {WRITE} for n in then.node_def) or any(
                self._has(f) for n in then.node_def for f in _called(n, self.library)):
            raise _unsupported(
                self.name, op.type, op.name, "is a cond with tf.summary calls in both "
                "branches or nested inside", "call tf.summary.* at the top level of the "
                "step, under tf.summary.record_if(condition)")

    def _cond_inputs(self, op, then):
        """``(host_inputs, host_types, writers, reads)`` of a cond: its condition and
        non-resource inputs transferred, the writers its writes use (by branch argument),
        and the ``(ReadVariableOp, variable)`` reads of its branch."""
        pred, inputs = op.inputs[0], list(op.inputs[1:])
        args = [a.name for a in then.signature.input_arg]
        writers, reads = {}, []
        host_inputs = [self._transfer(pred)]
        host_types = []
        for arg, tensor in zip(args, inputs):
            if tensor.dtype != tf.resource:
                host_inputs.append(self._host_value(tensor, op))
                host_types.append(tensor.dtype)
                continue
            for user in (n for n in then.node_def if arg in n.input):
                if user.op == WRITE and user.input[0] == arg:
                    writers[arg] = self._writer(tensor, op)
                elif user.op == "ReadVariableOp":
                    reads.append((user, tensor))
                else:
                    raise _unsupported(
                        self.name, user.op, user.name, "uses a resource inside the cond "
                        "of a tf.summary call", "compute the summary's value before the "
                        "tf.summary call")
        return host_inputs, host_types, writers, reads

    def _device_reads(self, op, node, reads, host_inputs, host_types):
        """Read in the program, where the cond stood, each variable its branch reads;
        the values are transferred (appended to ``host_inputs``). Returns the reads'
        node names."""
        device_reads = []
        for k, (read, tensor) in enumerate(reads):
            name = f"{op.name}/spatial_tf_read_{k}"
            device_node = tf.compat.v1.NodeDef(name=name, op="ReadVariableOp")
            device_node.input.append(f"{tensor.op.name}:{tensor.value_index}")
            device_node.input.extend(i for i in node.input if i.startswith("^"))
            device_node.attr["dtype"].CopyFrom(read.attr["dtype"])
            self.extra.append(device_node)
            device_reads.append(name)
            self._read_specs[f"{name}:0"] = _variable_spec(self.captures.get(tensor.op.name),
                                                           read.attr["dtype"].type)
            host_inputs.append(self._transfer(f"{name}:0"))
            host_types.append(tf.as_dtype(read.attr["dtype"].type))
        return device_reads

    def _host_cond(self, op, branch, host_inputs, host_types):
        """The host's ``If`` of ``op``'s name: ``branch`` (the rewritten true branch,
        returning what it wrote) or an empty one."""
        self.host_functions[branch.signature.name] = branch
        otherwise = empty_branch(branch)
        self.host_functions[otherwise.signature.name] = otherwise
        for n in branch.node_def:
            for f in _called(n, self.library):
                self._host_library(f)
        host = tf.compat.v1.NodeDef(name=op.name, op="If", input=host_inputs)
        host.attr["Tcond"].type = tf.bool.as_datatype_enum
        host.attr["Tin"].list.type.extend(t.as_datatype_enum for t in host_types)
        host.attr["Tout"].list.type.extend(a.type for a in branch.signature.output_arg)
        host.attr["then_branch"].func.name = branch.signature.name
        host.attr["else_branch"].func.name = otherwise.signature.name
        self.host_nodes[op.name] = host

    def pad(self):
        """A zero the program returns to make the transfers pairs."""
        name = "spatial_tf_summary_pad"
        if not any(n.name == name for n in self.extra):
            node = tf.compat.v1.NodeDef(name=name, op="Const")
            node.attr["dtype"].type = tf.int32.as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(0, tf.int32))
            self.extra.append(node)
        return f"{name}:0"

    # ------------------------------------------------------------ the two parts

    def device(self, roots):
        """The graph with summary ops replaced, keeping what ``roots`` need."""
        nodes = dict(self.nodes)
        nodes.update(self.replaced)
        nodes.update((n.name, n) for n in self.extra)
        keep, stack = set(), [node_name(r) for r in roots]
        while stack:
            name = stack.pop()
            if name in keep or name not in nodes:
                continue
            keep.add(name)
            stack.extend(node_name(i) for i in nodes[name].input)
        arguments = {t.op.name for t in self.graph.inputs}  # fed by the program's inputs
        device = tf.compat.v1.GraphDef()
        device.versions.CopyFrom(self.graph_def.versions)
        device.library.CopyFrom(self.graph_def.library)
        device.node.extend(n for name, n in nodes.items()
                           if name in keep and name not in arguments)
        return device

    def host_graph(self):
        host = tf.compat.v1.GraphDef()
        host.versions.CopyFrom(self.graph_def.versions)
        host.node.extend(self.host_nodes.values())
        host.library.function.extend(self.host_functions.values())
        return host


def _variable_spec(variable_handle, dtype):
    variable = HandleVariable.from_handle(variable_handle) if variable_handle is not None \
        else None
    shape = variable.shape if variable is not None else None
    return tf.TensorSpec(shape, tf.as_dtype(dtype))


def _no_op(node):
    """A ``NoOp`` standing for ``node`` with its control inputs (so edges to it hold)."""
    return tf.compat.v1.NodeDef(name=node.name, op="NoOp",
                                input=[i for i in node.input if i.startswith("^")])
