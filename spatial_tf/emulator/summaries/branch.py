"""The true branch of a ``tf.summary.write`` cond, rewritten to run on the host.

When whether to record is known only when the step runs (``tf.summary.record_if`` with
a tensor, or a replica context's "replica 0 only"), ``tf.summary.write`` builds an
``If`` whose true branch (a ``FunctionDef``) computes the value and holds the
``WriteSummary``. ``host_branch`` returns that branch without the write, returning the
write's tag, value, step and metadata after its own result, and taking the values of the
variables it read (read in the program, where the cond stood) instead of the variables;
``empty_branch`` is the matching false branch.

>>> import tensorflow as tf
>>> @tf.function
... def f(x, record):
...     writer = tf.summary.create_file_writer("ram://summary_branch_doctest")
...     with writer.as_default(step=3), tf.summary.record_if(record):
...         return tf.summary.scalar("loss", x)
>>> library = f.get_concrete_function(tf.TensorSpec([]), tf.TensorSpec([], tf.bool)).graph
>>> then = [g for g in library.as_graph_def().library.function
...         if any(n.op == "WriteSummary" for n in g.node_def)][0]
>>> branch, writes = host_branch(then, reads=[], host_step=-1)
>>> [a.name for a in branch.signature.output_arg][1:]
['spatial_tf_tag_0', 'spatial_tf_value_0', 'spatial_tf_step_0', 'spatial_tf_metadata_0']
>>> [n.op for n in branch.node_def].count("WriteSummary"), writes[0][1]
(0, False)
"""
import numpy as np
import tensorflow as tf

from spatial_tf.emulator.summaries.parts import node_name

__all__ = ["host_branch", "empty_branch", "function_def", "const_value"]

WRITE = "WriteSummary"


def function_def():
    """An empty ``FunctionDef`` message (the type a ``GraphDef``'s library holds)."""
    return tf.compat.v1.GraphDef().library.function.add()


def const_value(node):
    """The value of a ``Const`` node as a Python value, else None."""
    if node is None or node.op != "Const":
        return None
    return tf.make_ndarray(node.attr["value"].tensor).tolist()


def host_branch(then, reads, host_step):
    """``then`` without its writes and resource inputs; see the module docstring.

    ``reads``: the branch's ``ReadVariableOp`` nodes, whose values become its last
    inputs. Returns the function and ``[(write node, its step is host_step)]``.
    """
    branch = function_def()
    branch.CopyFrom(then)
    branch.signature.name = f"{then.signature.name}_spatial_tf_host"
    branch.ClearField("arg_attr")  # by argument index, which changes
    branch.ClearField("resource_arg_unique_id")
    values = {f"{read.name}:value:0": f"spatial_tf_read_{k}" for k, read in enumerate(reads)}
    writes = [n for n in branch.node_def if n.op == WRITE]
    removed = {r.name for r in reads} | {w.name for w in writes}
    kept_args = [a for a in branch.signature.input_arg if a.type != tf.resource.as_datatype_enum]
    del branch.signature.input_arg[:]
    branch.signature.input_arg.extend(kept_args)
    for k, read in enumerate(reads):
        branch.signature.input_arg.add(name=f"spatial_tf_read_{k}", type=read.attr["dtype"].type)
    nodes = {n.name: n for n in branch.node_def}
    result = [(w, const_value(nodes.get(node_name(w.input[1]))) == host_step) for w in writes]
    for k, write in enumerate(writes):  # inputs: writer, step, tensor, tag, metadata
        for suffix, ref, dtype in (("tag", write.input[3], tf.string.as_datatype_enum),
                                   ("value", write.input[2], write.attr["T"].type),
                                   ("step", write.input[1], tf.int64.as_datatype_enum),
                                   ("metadata", write.input[4], tf.string.as_datatype_enum)):
            name = f"spatial_tf_{suffix}_{k}"
            branch.signature.output_arg.add(name=name, type=dtype)
            branch.ret[name] = values.get(ref, ref)
    kept = [n for n in branch.node_def if n.name not in removed]
    for n in kept:
        inputs = [values.get(i, i) for i in n.input
                  if not (i.startswith("^") and i[1:] in removed)]
        del n.input[:]
        n.input.extend(inputs)
    del branch.node_def[:]
    branch.node_def.extend(kept)
    for name in removed:
        branch.control_ret.pop(name, None)
    controls = [c for c in branch.signature.control_output if c not in removed]
    del branch.signature.control_output[:]
    branch.signature.control_output.extend(controls)
    return branch, result


def empty_branch(branch):
    """The false branch for ``branch``: False, then empty values of the same types."""
    otherwise = function_def()
    otherwise.signature.CopyFrom(branch.signature)
    otherwise.signature.name = f"{branch.signature.name}_empty"
    otherwise.signature.ClearField("control_output")
    otherwise.signature.is_stateful = False
    for k, arg in enumerate(otherwise.signature.output_arg):
        dtype = tf.as_dtype(arg.type)
        value = np.zeros([], dtype.as_numpy_dtype) if k == 0 else \
            np.zeros([0], object if dtype == tf.string else dtype.as_numpy_dtype)
        node = otherwise.node_def.add(name=f"empty_{k}", op="Const")
        node.attr["dtype"].type = arg.type
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, dtype))
        otherwise.ret[arg.name] = f"empty_{k}:output:0"
    return otherwise
