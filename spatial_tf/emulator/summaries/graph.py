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
  with its branch rewritten by ``summaries.branch``), computed from the transfers; and
  each other cond, loop or nested function holding summary ops, run whole there after
  the step (a ``HostRun``), as TPUStrategy runs summary ops on the host where they
  stand. TensorFlow's other write ops (``WriteScalarSummary``, ...) are made again there.

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
>>> [t.numpy().tolist() for t in program(tf.ones([2]))]  # x * 2, then the step and value
[[2.0, 2.0], 3, 2.0]
"""
from typing import Any, List

import tensorflow as tf

from spatial_tf.emulator.xla.errors import CompileError
from spatial_tf.emulator.xla.handles import HandleVariable
from spatial_tf.emulator.summaries.branch import empty_branch, host_branch
from spatial_tf.emulator.summaries.parts import (INPUT, HostRun, Split, Write,
                                                 depends_on_outer_condition, inputs_used,
                                                 node_name)

__all__ = ["split", "SUMMARY_OPS"]

WRITE, FLUSH = "WriteSummary", "FlushSummaryWriter"
# TensorFlow's other write ops (tf.compat.v1 / contrib-style summaries, summary_ops_v2):
# run again on the host with the values the step computed
RAW_WRITES = frozenset({
    "WriteScalarSummary", "WriteHistogramSummary", "WriteImageSummary",
    "WriteAudioSummary", "WriteRawProtoSummary", "WriteGraphSummary", "ImportEvent",
})
WRITES = RAW_WRITES | {WRITE}
# writers created or closed inside the step: refused
UNSUPPORTED = frozenset({
    "SummaryWriter", "CreateSummaryFileWriter", "CreateSummaryDbWriter",
    "CloseSummaryWriter",
})
SUMMARY_OPS = UNSUPPORTED | WRITES | {FLUSH}
_CONDS = ("If", "StatelessIf")
# what each op that runs functions is, for messages
_CONSTRUCTS = {
    "If": "a tf.cond", "StatelessIf": "a tf.cond", "Case": "a tf.switch_case",
    "StatelessCase": "a tf.switch_case",
    "While": "a tf.while_loop (or a Python loop over tensors)",
    "StatelessWhile": "a tf.while_loop (or a Python loop over tensors)",
    "PartitionedCall": "a nested tf.function", "StatefulPartitionedCall": "a nested tf.function",
}
# ops that change variables: a construct holding them is not run again on the host
_UPDATES = ("Assign", "ResourceApply", "ResourceSparseApply", "ResourceScatter",
            "ResourceStridedSliceAssign", "DestroyResourceOp")
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
    cut.check_host_results([f"{t.op.name}:{t.value_index}" for t in outputs])
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


# what TPUStrategy does where the emulator refuses: the difference each refusal states
_ON_TPU = ("TPUStrategy runs summary ops on the host as the TPU reaches them (outside "
           "compilation)")


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
        self.host_ops = {}  # name -> construct of the ops run again on the host
        self.host_writers = {}  # writer handle id (None: the run's default) -> placeholder
        self._host_id = f"{id(self):x}"
        flushed = []
        for op in graph.get_operations():
            node = self.nodes[op.name]
            if op.type in WRITES:
                self._write(op)
            elif op.type == FLUSH:
                flushed.append(self._writer(op.inputs[0], op))
                self.replaced[op.name] = _no_op(node)
            elif op.type in UNSUPPORTED:
                raise _unsupported(
                    self.name, op.type, op.name, "creates or closes a summary writer "
                    f"inside the step; {_ON_TPU}, but the emulator writes the step's "
                    "summaries on the host after it ran, with writers made outside it",
                    "create and close summary writers outside the step (entering one "
                    "with writer.as_default() inside the step works)")
            elif op.type in _CONDS and self._simple_cond(op, node):
                self._cond(op, node)
            elif any(self._has(f) for f in _called(node, self.library)):
                self._host_op(op, node)
        for w in self.writes:
            if isinstance(w, HostRun):
                w.flushed = [h for _, h in w.writers
                             if h is not None and any(h is f for f in flushed)]
            else:
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
        if tensor.op.name in self.host_ops:
            self.check_host_results([tensor.name])
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
        """A write at the step's top level: its step and values computed in the program
        (strings on the host), the write itself made on the host after the step."""
        inputs = dict(zip([a.name for a in op.op_def.input_arg], op.inputs))
        writer, step = inputs.pop("writer"), inputs.pop("step", None)
        host_step = step is not None and self._is_host_step(self.nodes[step.op.name])
        at = None
        if step is not None:
            at = self._fetch(self._const_step() if host_step else self._transfer(step),
                             tf.int64)
        if op.type == WRITE:
            self.writes.append(Write(
                writer=self._writer(writer, op),
                tag=self._fetch(self._host_value(inputs["tag"], op), tf.string),
                value=self._fetch(self._host_value(inputs["tensor"], op),
                                  inputs["tensor"].dtype),
                step=at,
                metadata=self._fetch(self._host_value(inputs["summary_metadata"], op),
                                     tf.string),
                host_step=host_step,
            ))
        else:  # WriteScalarSummary, ...: the same op again on the host
            self.writes.append(Write(
                writer=self._writer(writer, op), tag=None, value=None, step=at,
                metadata=None, host_step=host_step, op=op.type,
                args={name: self._fetch(self._host_value(t, op), t.dtype)
                      for name, t in inputs.items()},
                attrs={a.name: op.get_attr(a.name) for a in op.op_def.attr
                       if a.type != "type"},
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
                outer=depends_on_outer_condition(op.inputs[0]),
            ))
        # in the program: the cond's outcome is its condition; reads keep their place
        stand_in = tf.compat.v1.NodeDef(name=op.name, op="Identity",
                                        input=[node.input[0]])
        stand_in.input.extend(i for i in node.input if i.startswith("^"))
        stand_in.input.extend(f"^{r}" for r in device_reads)
        stand_in.attr["T"].type = tf.bool.as_datatype_enum
        self.replaced[op.name] = stand_in

    def _simple_cond(self, op, node):
        """A cond that ``tf.summary.write`` made (``record_if`` with a tensor, or a
        replica's "replica 0 only"): ``tf.summary.write`` s directly in its true branch,
        nothing to write in its false one, and resources used in it only by its writes
        and by variable reads; its one result is whether it recorded. Other conds
        holding summaries run on the host whole."""
        then = self.library.get(node.attr["then_branch"].func.name)
        if then is None or not self._has(then.signature.name, WRITE, direct=True) or \
                list(node.attr["Tout"].list.type) != [tf.bool.as_datatype_enum]:
            return False  # its one result: whether it recorded
        if self._has(node.attr["else_branch"].func.name) or any(
                n.op in SUMMARY_OPS - {WRITE} for n in then.node_def) or any(
                self._has(f) for n in then.node_def for f in _called(n, self.library)):
            return False
        args = [a.name for a in then.signature.input_arg]
        for arg, tensor in zip(args, op.inputs[1:]):
            if tensor.dtype != tf.resource:
                continue
            for user in (n for n in then.node_def if arg in n.input):
                if not ((user.op == WRITE and user.input[0] == arg)
                        or user.op == "ReadVariableOp"):
                    return False
        return True

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

    # ------------------------------------------------------------ constructs on the host

    def _host_op(self, op, node):
        """A cond, loop or nested function holding summary ops: run whole on the host
        after the step, as TPUStrategy runs its summary ops on the host where they
        stand (a loop's in every iteration). Its inputs are transferred, the variables
        it reads are read in the program where it stood (and given to it on the host
        as variables of the host's own), and its writes go to the writers it was given.
        In the program it is a ``NoOp`` after those reads."""
        construct = _CONSTRUCTS.get(op.type, f"a {op.type} op")
        self._check_host_run(op, construct, _called(node, self.library))
        inputs, controls, reads, writers = [], [], [], []
        for k, tensor in enumerate(op.inputs):
            if tensor.dtype != tf.resource:
                inputs.append(self._host_value(tensor, op))
                continue
            capture = self.captures.get(tensor.op.name)
            if tensor.op.type == "Placeholder" and capture is not None and \
                    _is_variable(capture):
                read, value = self._device_read(op, node, tensor, capture, k)
                reads.append(read)
                handle, assign = self._host_variable(op, k, capture, value)
                inputs.append(handle)
                controls.append(f"^{assign}")
                continue
            writer = self._writer(tensor, op)
            key = None if writer is None else id(writer)
            if key not in self.host_writers:
                placeholder = tf.compat.v1.NodeDef(
                    name=f"spatial_tf_summary_writer_{len(self.host_writers)}",
                    op="Placeholder")
                placeholder.attr["dtype"].type = tf.resource.as_datatype_enum
                self.host_nodes[placeholder.name] = placeholder
                self.host_writers[key] = (placeholder.name, writer)
            if self.host_writers[key] not in writers:
                writers.append(self.host_writers[key])
            inputs.append(f"{self.host_writers[key][0]}:0")
        host = tf.compat.v1.NodeDef()
        host.CopyFrom(node)
        host.device = ""
        del host.input[:]
        host.input.extend(inputs + controls)
        self.host_nodes[op.name] = host
        for f in _called(node, self.library):
            self._host_library(f)
        done = tf.compat.v1.NodeDef(name=f"{op.name}/spatial_tf_done", op="Const",
                                    input=[f"^{op.name}"])
        done.attr["dtype"].type = tf.bool.as_datatype_enum
        done.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(True))
        self.host_nodes[done.name] = done
        self.writes.append(HostRun(op=op.name, construct=construct, done=f"{done.name}:0",
                                   writers=writers))
        self.host_ops[op.name] = construct
        self.replaced[op.name] = tf.compat.v1.NodeDef(
            name=op.name, op="NoOp",
            input=[i for i in node.input if i.startswith("^")] + [f"^{r}" for r in reads])

    def _check_host_run(self, op, construct, functions):
        """Refuse a construct the host cannot run again: one that changes variables,
        or writes with the default step of the host (none set while tracing)."""
        seen, stack = set(), list(functions)
        while stack:
            name = stack.pop()
            if name in seen or name not in self.library:
                continue
            seen.add(name)
            for n in self.library[name].node_def:
                stack.extend(_called(n, self.library))
                if n.op.startswith(_UPDATES):
                    raise _unsupported(
                        self.name, op.type, op.name, f"is {construct} holding tf.summary "
                        f"calls that also changes variables ({n.op} '{n.name}'); "
                        f"{_ON_TPU}, but the emulator writes such summaries by running "
                        f"{construct} again on the host after the step, which must not "
                        f"change the variables twice",
                        f"keep only the summary calls and what they log inside "
                        f"{construct}, and update the variables outside it (or return the "
                        f"values to log from the step and write them after strategy.run)")
                if n.op in UNSUPPORTED:
                    raise _unsupported(
                        self.name, n.op, n.name, f"creates or closes a summary writer inside "
                        f"{construct} of the step ('{op.name}'); {_ON_TPU}, but the "
                        f"emulator writes the step's summaries on the host after it ran, "
                        f"with writers made outside it", "create and close summary writers outside the step "
                        "(entering one with writer.as_default() inside the step works)")
                if self._is_host_step(n):
                    raise _unsupported(
                        self.name, op.type, op.name, f"is {construct} holding a tf.summary "
                        f"call with no step, traced where no default step was set; "
                        f"{_ON_TPU}, with the default step set there, but the emulator "
                        f"runs {construct} again on the host after the step and needs its "
                        f"step when the step is traced",
                        "pass step= to the summary call, or set a default step before the "
                        "step is traced (writer.as_default(step=...) or "
                        "tf.summary.experimental.set_step(step) around strategy.run)")

    def _device_read(self, op, node, tensor, capture, k):
        """A read of the variable ``tensor`` in the program where ``op`` stood:
        ``(its node name, the host's reference to its value)``."""
        variable = HandleVariable.from_handle(capture)
        name = f"{op.name}/spatial_tf_read_{k}"
        device_node = tf.compat.v1.NodeDef(name=name, op="ReadVariableOp")
        device_node.input.append(f"{tensor.op.name}:{tensor.value_index}")
        device_node.input.extend(i for i in node.input if i.startswith("^"))
        device_node.attr["dtype"].type = variable.dtype.as_datatype_enum
        self.extra.append(device_node)
        self._read_specs[f"{name}:0"] = tf.TensorSpec(variable.shape, variable.dtype)
        return name, self._transfer(f"{name}:0")

    def _host_variable(self, op, k, capture, value):
        """A variable of the host's own holding ``value`` (a host reference) for input
        ``k`` of ``op``: ``(its handle, the assignment)``."""
        variable = HandleVariable.from_handle(capture)
        handle = tf.compat.v1.NodeDef(name=f"{op.name}/spatial_tf_variable_{k}",
                                      op="VarHandleOp")
        handle.attr["dtype"].type = variable.dtype.as_datatype_enum
        handle.attr["shape"].shape.unknown_rank = True
        handle.attr["container"].s = b""
        handle.attr["shared_name"].s = \
            f"spatial_tf_summary_{self._host_id}_{op.name}_{k}".encode()
        assign = tf.compat.v1.NodeDef(name=f"{op.name}/spatial_tf_assign_{k}",
                                      op="AssignVariableOp", input=[f"{handle.name}:0", value])
        assign.attr["dtype"].type = variable.dtype.as_datatype_enum
        self.host_nodes[handle.name] = handle
        self.host_nodes[assign.name] = assign
        return f"{handle.name}:0", assign.name

    def check_host_results(self, names):
        """Refuse a construct run on the host whose results ``names`` (device node names
        and the step's outputs, as ``GraphDef`` references) use."""
        for ref in names:
            if not ref.startswith("^") and node_name(ref) in self.host_ops:
                construct = self.host_ops[node_name(ref)]
                op_type = self.nodes[node_name(ref)].op
                raise _unsupported(
                    self.name, op_type, node_name(ref), f"is {construct} holding tf.summary "
                    f"calls whose result the step uses ('{ref}'); {_ON_TPU}, but the "
                    f"emulator writes such summaries by running {construct} on the host "
                    f"after the step, and the compiled step cannot wait for it",
                    f"compute what the step uses outside {construct}, and keep only the "
                    f"summary calls and what they log inside it")

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
            self.check_host_results(nodes[name].input)
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
