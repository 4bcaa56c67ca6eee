"""Run a compiled step for every replica: eagerly now, or as a host call in a graph.

``run(emulator, fn, args, kwargs)`` gives each replica its own arguments (per-replica
values from the emulator's datasets, the same tensor otherwise) and its own copy of each
distributed variable (``copies.StepCopies``), compiles the step (cached by the
emulator), runs it and writes each replica's new values of the variables it updates to
that replica's copies, once, after every replica succeeded. With one replica the outputs
are plain tensors; with several, each output is a per-replica value holding every
replica's result, as TPUStrategy returns. A step with no output and no variable write
has nothing to run.
"""
import warnings

import numpy as np
import tensorflow as tf

from spatial_tf import context
from spatial_tf.emulator.compile.trace import CallSignature, function_name, outline as trace_outline
from spatial_tf.emulator.distribute import hosts, pieces
from spatial_tf.emulator.distribute.copies import StepCopies
from spatial_tf.emulator.distribute.replica import EmulatedReplicaContext, in_program, tracing
from spatial_tf.emulator.summaries import writes
from spatial_tf.emulator.xla import replicas
from spatial_tf.emulator.xla.handles import is_variable

__all__ = ["run"]


def run(emulator, fn, args, kwargs):
    """Run ``fn`` emulated on ``emulator``; see the module docstring."""
    _check_not_in_xla_function(fn)
    num_replicas = emulator.num_replicas_in_sync
    # checks the arguments before they are split per replica
    CallSignature(args, kwargs).require_values(function_name(fn), "run")
    calls = replicas.per_replica_calls(
        args, kwargs, num_replicas, emulator.experimental_local_results
    )
    signatures = [CallSignature(a, k) for a, k in calls]
    _check_same_shapes(signatures)
    distributed = hosts.distributed_indices(args, kwargs) if emulator.num_hosts > 1 else []
    if not all(s.shape.is_fully_defined() for s in signatures[0].specs):
        # sizes known only at run time (a batch without drop_remainder, an autograph
        # loop over a dataset): compiled then, once per size met, as TPUStrategy does
        with context.logical_device_scope(emulator):
            return _run_in_graph_when_sizes_known(emulator, fn, signatures, distributed)
    lowered = emulator.lower(fn, signature=signatures[0])
    if not lowered.traced.result_shapes:  # no output, no variable write: nothing to run
        return _pack(lowered.traced, [[]] * num_replicas)
    step = lowered.compile()
    with context.logical_device_scope(emulator):
        if tf.executing_eagerly():
            return _run_now(emulator, step, signatures, distributed)
        return _run_in_graph(emulator, step, signatures, distributed)


def _check_not_in_xla_function(fn):
    """Refuse a step called while a ``tf.function(jit_compile=True)`` is traced: the
    emulated step is a host call, which XLA cannot compile into that function."""
    if not pieces.in_xla_compiled_function() or in_program():
        return
    name = getattr(fn, "__name__", None) or type(fn).__name__
    raise RuntimeError(
        f"strategy.run({name}) is called inside a tf.function(jit_compile=True): the "
        f"emulator runs each step as a host call, which XLA cannot compile into that "
        f"function. Expected strategy.run in eager code or in a tf.function without "
        f"jit_compile. Fix: call strategy.run outside jit_compile=True; TPUStrategy "
        f"compiles the step itself (drop jit_compile=True from the function that calls "
        f"strategy.run, or put it on the step function)."
    )


def _check_same_shapes(signatures):
    for r, signature in enumerate(signatures[1:], start=1):
        if signature.key != signatures[0].key:
            raise ValueError(
                f"strategy.run: replica {r} gets arguments {list(signature.specs)} but "
                f"replica 0 gets {list(signatures[0].specs)}; every replica runs the same "
                f"compiled program. TPUStrategy pads such batches with XLA's dynamic "
                f"padder; the emulator does not. Fix: give every replica batches of the "
                f"same shape (drop_remainder=True)."
            )


def _numpy(t):
    return t.numpy() if hasattr(t, "numpy") else np.asarray(t)


def _execute(emulator, step, copies, per_replica_args, captures, extra, distributed):
    """Run every replica; ``(outputs per replica, new values)``: each replica's value of
    each variable it writes, for ``StepCopies.written``. ``captures``: replica 0's
    captured values; ``extra``: the other replicas' copies' (``copies.extra()``, the
    step's ``StepCopies``);
    ``distributed``: the positions of the tensor arguments given per replica."""
    traced = step.traced
    _check_hosts(emulator, traced.name, per_replica_args, distributed)
    outputs, updates = step.program.execute_replicas(
        per_replica_args, captures, copies.replica_captures(captures, extra))
    return outputs, copies.new_values(traced.writes, updates)


def _check_hosts(emulator, name, per_replica_args, indices):
    """Warn once per step when every host fed its replicas the same batches."""
    key = ("identical hosts", name)
    if emulator.num_hosts > 1 and emulator.first_warning(key, lambda: hosts.identical_hosts(
            per_replica_args, indices, emulator.host_layout.pipeline_of_replica)):
        warnings.warn(hosts.identical_hosts_message(repr(name), emulator.num_hosts),
                      hosts.IdenticalHostInputWarning, stacklevel=2)


def _pack(traced, per_replica_outputs):
    packed = [traced.pack_outputs(outputs) for outputs in per_replica_outputs]
    if len(packed) == 1:
        return packed[0]
    return tf.nest.map_structure(
        lambda *v: pieces.PerReplica(v) if tf.is_tensor(v[0]) else v[0], *packed
    )


def _run_now(emulator, step, signatures, distributed):
    traced = step.traced
    writes.check_steps(traced.summaries)
    copies = StepCopies(emulator, traced.captures)
    copies.check_writes(traced.name, traced.writes)
    captures = traced.capture_values()
    extra = [v.numpy() for _, v in copies.extra()]
    per_replica_args = [[_numpy(t) for t in s.tensors] for s in signatures]
    outputs, updates = _execute(emulator, step, copies, per_replica_args, captures, extra,
                                distributed)
    for var, value in zip(copies.written(traced.writes), updates):
        var.assign(value)
    _write_summaries(traced, outputs[0])
    return _pack(traced, [
        [tf.convert_to_tensor(o, dtype=s.dtype) for o, s in zip(replica_outputs, traced.output_specs)]
        for replica_outputs in outputs
    ])


def _run_in_graph(emulator, step, signatures, distributed):
    traced = step.traced
    writes.check_steps(traced.summaries)
    copies = StepCopies(emulator, traced.captures)
    copies.check_writes(traced.name, traced.writes)
    written = copies.written(traced.writes)
    num_replicas = len(signatures)
    num_args, num_captures = len(traced.arg_specs), len(traced.captures)
    output_specs = list(traced.output_specs)
    update_specs = [tf.TensorSpec(v.shape, v.dtype) for v in written]
    captures = [
        c.read_value() if is_variable(c) else tf.constant(c)
        for c in traced.captures
    ]
    extra = [v.read_value() for _, v in copies.extra()]
    inputs = [t for s in signatures for t in s.tensors] + captures + extra

    def host_call(*arrays):
        per_replica_args = [
            arrays[r * num_args:(r + 1) * num_args] for r in range(num_replicas)
        ]
        start = num_replicas * num_args
        outputs, updates = _execute(emulator, step, copies, per_replica_args,
                                    arrays[start:start + num_captures],
                                    arrays[start + num_captures:], distributed)
        flat = [o for replica_outputs in outputs for o in replica_outputs] + updates
        specs = output_specs * num_replicas + update_specs
        done = np.zeros((), np.int32)  # so that a step with no results still runs
        return [np.asarray(a, dtype=s.dtype.as_numpy_dtype) for a, s in zip(flat, specs)] + [done]

    specs = output_specs * num_replicas + update_specs
    results = tf.numpy_function(
        host_call, inputs, [s.dtype for s in specs] + [tf.int32],
        stateful=True, name=f"emulated_{_graph_name(traced.name)}",
    )
    return _finish_graph_call(emulator, traced, results, specs, written, num_replicas)


def _finish_graph_call(emulator, traced, results, specs, written, num_replicas):
    """Set the host call's result shapes, assign ``written`` from its last results, write
    the summaries, and pack each replica's outputs, all after the call succeeded."""
    done = results.pop()
    for r, s in zip(results, specs):
        r.set_shape(s.shape)
    num_outputs = len(traced.output_specs) * num_replicas
    outputs, updates = results[:num_outputs], results[num_outputs:]
    assigns = [var.assign(value) for var, value in zip(written, updates)]
    with tf.control_dependencies(assigns + [done]):
        outputs = [tf.identity(o) for o in outputs]
        written_summaries = _write_summaries(traced, outputs[:len(traced.output_specs)])
    if written_summaries:
        with tf.control_dependencies(written_summaries):
            outputs = [tf.identity(o) for o in outputs]
    n = len(traced.output_specs)
    return _pack(traced, [outputs[r * n:(r + 1) * n] for r in range(num_replicas)])


def _run_in_graph_when_sizes_known(emulator, fn, signatures, distributed):
    """Embed a host call that compiles ``fn`` for the sizes it receives (cached by the
    emulator per shape), runs it and returns the new value of every variable's copies."""
    with tracing(emulator):
        outline = trace_outline(fn, signature=signatures[0],
                                context=lambda: EmulatedReplicaContext(emulator))
    variables = outline.variables
    copies = StepCopies(emulator, variables).copies
    flat = [v for c in copies for v in c]  # every copy of every variable
    starts = np.cumsum([0] + [len(c) for c in copies]).tolist()
    keys = {_variable_key(v): starts[i] for i, v in enumerate(variables)}
    num_replicas, num_args = len(signatures), len(outline.arg_specs)
    output_specs = list(outline.output_specs)

    def host_call(*arrays):
        per_replica_args = [
            list(arrays[r * num_args:(r + 1) * num_args]) for r in range(num_replicas)
        ]
        values = list(arrays[num_replicas * num_args:])
        concrete = [CallSignature(*signatures[0].bind(a)) for a in per_replica_args]
        _check_same_shapes(concrete)
        step = emulator.compile(fn, signature=concrete[0])
        traced = step.traced
        step_copies = StepCopies(emulator, traced.captures)
        step_copies.check_writes(traced.name, traced.writes)
        first = [_first_copy(c, keys, traced.name) for c in traced.captures]
        captures = [c if i is None else values[i] for c, i in zip(traced.captures, first)]
        extra = [values[first[c] + 1 + j] for c, copies in enumerate(step_copies.copies)
                 for j in range(len(copies) - 1)]
        outputs, updates = _execute(emulator, step, step_copies, per_replica_args, captures,
                                    extra, distributed)
        new = iter(updates)
        for _, c in traced.writes:
            for r in range(len(step_copies.copies[c])):
                values[first[c] + r] = next(new)
        results = [o for replica_outputs in outputs for o in replica_outputs] + values
        dtypes = [s.dtype for s in output_specs] * num_replicas + [v.dtype for v in flat]
        done = np.zeros((), np.int32)  # so that a step with no results still runs
        return [np.asarray(a, dtype=d.as_numpy_dtype) for a, d in zip(results, dtypes)] + [done]

    specs = output_specs * num_replicas + [tf.TensorSpec(v.shape, v.dtype) for v in flat]
    inputs = [t for s in signatures for t in s.tensors] + [v.read_value() for v in flat]
    results = tf.numpy_function(
        host_call, inputs, [s.dtype for s in specs] + [tf.int32],
        stateful=True, name=f"emulated_{_graph_name(outline.name)}",
    )
    return _finish_graph_call(emulator, outline, results, specs, flat, num_replicas)


def _variable_key(var):
    return id(var.handle)


def _first_copy(capture, keys, name):
    """Where replica 0's copy of ``capture`` is among the host call's variable values;
    None for a constant."""
    if not is_variable(capture):
        return None
    index = keys.get(_variable_key(capture))
    if index is None:
        raise RuntimeError(
            f"{name}: compiled for the sizes of this call, the step uses the variable "
            f"{capture.name}, which it did not use when the enclosing tf.function was "
            f"traced. Fix: create every variable before the first step (build the model "
            f"and optimizer first) and keep the step's variables the same for all sizes."
        )
    return index


def _write_summaries(traced, replica_outputs):
    """Write the step's ``tf.summary`` calls with replica 0's values, as TPUStrategy does."""
    if not traced.summaries:
        return []
    values = replica_outputs[len(replica_outputs) - 2 * len(traced.summaries):]
    pairs = [(values[2 * i], values[2 * i + 1]) for i in range(len(traced.summaries))]
    return writes.write(traced.summaries, pairs)


def _graph_name(name):
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in name)
