"""``tf.summary`` calls inside a step: traced as TensorFlow's own ops, written on the host.

On TPU, summary ops in a step run on the host (TPUStrategy moves them out of the
compiled program) and only replica 0 records. The emulator does the same without
replacing anything in TensorFlow: while a step is traced, ``default_writer`` makes a
summary writer of its own default (``writer.as_default()``, its events kept in memory
and never written), so ``tf.summary.write`` (which ``tf.summary.scalar``, ``histogram``,
``image`` and ``text`` call) builds its real ops in the step's graph.
``graph.split`` cuts them out of the program XLA compiles and makes their
numeric inputs extra results of the program; after the step ran, ``write`` computes the
rest on the host (PNG encoding, strings, a cond's branch) from replica 0's values and
writes with the summary writer that was default at the call: one the step itself made
default (``with writer.as_default():`` inside the step, as in TensorFlow's
``test_spmd_with_summary``; flushed after writing, as leaving it does), else the one
default where ``run`` is called. A call with no step, traced where no default step was
set, takes the default step where the step runs.

>>> import tensorflow as tf
>>> with default_writer():
...     @tf.function
...     def step(x):
...         return tf.summary.scalar("loss", x, step=3)
...     graph = step.get_concrete_function(tf.TensorSpec([])).graph
>>> sorted({op.type for op in graph.get_operations()} & {"WriteSummary", "If"})
['WriteSummary']
"""
import contextlib
import dataclasses
import threading
from typing import Any, List

import tensorflow as tf

from spatial_tf._tf_internals import (default_summary_writer_handle, gen_xla_ops,
                                      summary_recording_condition)
from spatial_tf.emulator.summaries import parts

__all__ = ["HOST_STEP", "ResultPair", "default_writer", "tracing_writer_handle", "pairs",
           "write"]

# the default step while tracing when none is set: such writes take the host's
HOST_STEP = -(2 ** 63)
WRITE = "WriteSummary"
_LOGDIR = "ram://spatial_tf/summaries_while_tracing"  # TensorFlow's in-memory file system
_lock = threading.Lock()
_tracing_writer: List[Any] = []  # [writer, its handle or None], made at first use


def _writer():
    with _lock:
        if not _tracing_writer:
            with tf.init_scope():
                _tracing_writer.extend([tf.summary.create_file_writer(_LOGDIR), None])
        return _tracing_writer[0]


def tracing_writer_handle():
    """The resource handle of the writer ``default_writer`` makes default."""
    writer = _writer()
    with _lock:
        if _tracing_writer[1] is None:
            with tf.init_scope():
                _tracing_writer[1] = parts.handle(writer)
        return _tracing_writer[1]


@contextlib.contextmanager
def default_writer(deferred=None):
    """While tracing a step: the emulator's writer is the default summary writer, and
    ``HOST_STEP`` the default step if none is set. Leaving it flushes that writer now
    (outside the traced function), so a step without summaries gets no op from it.

    A ``record_if`` condition that is a tensor of an outer ``tf.function`` (``with
    tf.summary.record_if(flag): strategy.run(...)`` inside it) cannot enter the
    program, which is compiled on its own: the step is traced recording, True is
    appended to ``deferred``, and the condition is applied where the step runs
    (``recording_where_run``), as TPUStrategy's host does when it runs the summaries."""
    step = HOST_STEP if tf.summary.experimental.get_step() is None else None
    manager = _writer().as_default(step=step)
    outer = tf.is_symbolic_tensor(summary_recording_condition())
    with contextlib.ExitStack() as stack:
        if outer:  # always True, but computed in XLA only: TensorFlow keeps its conds
            with tf.name_scope(parts.OUTER_CONDITION):
                stand_in = gen_xla_ops.xla_replica_id() >= 0
            stack.enter_context(tf.summary.record_if(stand_in))
            if deferred is not None:
                deferred.append(True)
        manager.__enter__()
        try:
            yield
        finally:
            with tf.init_scope():
                manager.__exit__(None, None, None)


def recording_where_run():
    """The ``record_if`` condition where this is called, as a boolean tensor (True
    when none is set; a callable is called)."""
    condition = summary_recording_condition()
    condition = condition() if callable(condition) else condition
    return tf.constant(True) if condition is None else tf.cast(condition, tf.bool)


class _HostWrites:
    """Writes one traced step's summaries from its transfers (``parts.Split``)."""

    def __init__(self, cut):
        self.cut = cut
        self._function = None
        self._runs = {}

    def write(self, transfers):
        if self._function is None:
            self._function = self.cut.host_function()
        results = self._function(*transfers) if self.cut.fetches else []
        written = []
        for w in self.cut.writes:  # in the step's order
            if isinstance(w, parts.HostRun):
                written.append(self._run(w, transfers))
            else:
                written.append(_write(w, results, self.cut.outer_condition))
        flushed = {id(h): h for w in self.cut.writes for h in w.flushes()}
        if flushed:
            with tf.control_dependencies([w for w in written if w is not None]):
                written += [tf.raw_ops.FlushSummaryWriter(writer=h) for h in flushed.values()]
        return [w for w in written if w is not None]

    def _run(self, run, transfers):
        """Run a cond, loop or nested function of the step on the host; None when it
        writes to the writer default where the step runs and none is."""
        handles = []
        for _, handle in run.writers:
            if handle is None:
                handle = default_summary_writer_handle()
                if handle is None:
                    return None
            handles.append(handle)
        if run.op not in self._runs:
            self._runs[run.op] = self.cut.host_run(run)
        function = self._runs[run.op]

        def execute():  # its result, so that a graph keeps the call
            return tf.identity(tf.nest.flatten(function(transfers, handles))[0])

        if any(h is None for _, h in run.writers):  # the run's record_if holds
            record = tf.summary.should_record_summaries()
        elif self.cut.outer_condition:
            record = recording_where_run()
        else:
            return execute()
        known = _static_bool(record)
        if known is not None:  # decided here (a cond around the call would be too)
            return execute() if known else None
        return tf.cond(record, execute, lambda: tf.constant(False))


@dataclasses.dataclass(frozen=True)
class ResultPair:
    """Two of a step's extra program results, which the host reads to write the step's
    summaries (the runner hands them over in pairs; ``pairs`` makes them)."""

    host: Any
    index: int


def pairs(cut):
    """The ``ResultPair`` s of a ``parts.Split``: its transfers, two at a time."""
    host = _HostWrites(cut)
    return tuple(ResultPair(host, i) for i in range(len(cut.transfers) // 2))


def write(recorded, values):
    """Write the summaries of a step whose extra results, as ``recorded`` (its
    ``ResultPair`` s) names them, are ``values`` (one pair each); returns the ops."""
    if not recorded:
        return []
    host = recorded[0].host
    flat = [v for pair in values for v in pair]
    return host.write(flat[:len(host.cut.transfers)])


def check_steps(recorded) -> None:
    """Before a step runs: ``ValueError`` when one of its summaries (``recorded``, its
    ``ResultPair`` s) will need a default step that is not set, so that the step is not
    run, and its variables not updated, for a write that must fail."""
    if recorded and tf.summary.experimental.get_step() is None and any(
            w.writer is not None and w.host_step for w in recorded[0].host.cut.writes
            if isinstance(w, parts.Write)):
        raise ValueError(
            "A tf.summary call in the step wrote to the summary writer the step made "
            "default, with no step: none was passed, and no default step was set where "
            "the step was traced or where it runs. Fix: pass step= to the summary "
            "call, or enter the writer with writer.as_default(step=...).")


def _static_bool(t):
    """The value of the boolean tensor ``t`` if it is known now (a constant, or the
    ``LogicalAnd`` of constants ``tf.summary.should_record_summaries`` makes), else None."""
    known = tf.get_static_value(t)
    if known is not None or tf.executing_eagerly() or t.op.type != "LogicalAnd":
        return None if known is None else bool(known)
    parts_known = [tf.get_static_value(i) for i in t.op.inputs]
    return None if any(k is None for k in parts_known) else all(bool(k) for k in parts_known)


def _write(w, results, outer_condition=False):
    def record():  # the step is a scalar when the cond recorded (empty when not)
        step = None if w.host_step or w.step is None else tf.reshape(results[w.step], [])
        if w.writer is None:  # the writer default where the step runs
            if w.op == WRITE:
                return tf.summary.write(results[w.tag], results[w.value], step=step,
                                        metadata=results[w.metadata])
            handle = default_summary_writer_handle()
            if handle is None:
                return tf.constant(False)
            return tf.cond(tf.summary.should_record_summaries(),
                           lambda: _again(w, results, handle, step),
                           lambda: tf.constant(False))
        return _again(w, results, w.writer, step)

    def decided():  # by a record_if inside the step, which the one around run must not undo
        with tf.summary.record_if(True):
            return record()

    if w.flag is None:  # recorded when traced: a record_if(True) inside the step decided
        return decided() if outer_condition else record()
    if not w.outer:  # a record_if tensor of the step's own decided (and "replica 0")
        return tf.cond(results[w.flag], decided, lambda: tf.constant(False))
    if w.writer is None:  # its tf.summary.write checks the condition where it runs
        return tf.cond(results[w.flag], record, lambda: tf.constant(False))
    return tf.cond(tf.logical_and(results[w.flag], recording_where_run()), record,
                   lambda: tf.constant(False))


def _again(w, results, writer, step):
    """The write op ``w`` stands for, made again with ``writer`` and ``step``."""
    if w.step is not None:
        at = step if step is not None else tf.summary.experimental.get_step()
        if at is None:  # check_steps refuses this before the step runs
            raise ValueError(
                "A tf.summary call in the step wrote to the summary writer the step made "
                "default, with no step: none was passed, and no default step was set "
                "where the step was traced or where it runs. Fix: pass step= to the "
                "summary call, or enter the writer with writer.as_default(step=...).")
        args = {"step": tf.cast(at, tf.int64)}
    else:
        args = {}
    if w.op == WRITE:
        args.update(tensor=results[w.value], tag=results[w.tag],
                    summary_metadata=results[w.metadata])
    else:
        args.update({name: results[i] for name, i in w.args.items()}, **w.attrs)
    op = getattr(tf.raw_ops, w.op)(writer=writer, **args)
    with tf.control_dependencies([op]):
        return tf.constant(True)
