"""Keep TensorFlow's and XLA's own log lines off the terminal while spatial_tf works.

Tracing a step with XLA and compiling it through jaxlib makes TensorFlow and XLA print
C++ log lines to stderr ("XLA service ... initialized", "Compiled cluster using XLA!",
"GSPMD sharding propagation is going to be deprecated ... Shardy") that say nothing about
the user's program. ``quiet()`` wraps spatial_tf's own calls into TensorFlow and XLA:
during it, stderr (file descriptor 2) goes to a temporary file; afterwards every line
that is not such an info or warning log line is written back to stderr, so errors and
Python warnings still reach the terminal. Python-level ``absl`` / ``tensorflow`` logger
records below ERROR are dropped in the same span.

One switch shows everything: set the environment variable ``SPATIAL_TF_VERBOSE=1``
(read at every call, so setting it in a running notebook works).

``import spatial_tf`` calls ``quiet_tensorflow_start()``: a script's own ``import
tensorflow`` after it starts as quietly as the command line (``TF_CPP_MIN_LOG_LEVEL=2``,
and the start-up lines, the oneDNN notice and the CPU-instruction notice, filtered as
above), unless ``SPATIAL_TF_VERBOSE=1`` or ``TF_CPP_MIN_LOG_LEVEL`` was set first or
TensorFlow was already imported. It does not import TensorFlow.

>>> import os, sys
>>> with quiet():
...     _ = os.write(2, b"W1123 09:34:34.858641 5551 sharding_propagation.cc:3132] GSPMD...\\n")
>>> is_log_noise("I0000 00:00:1795426508.384303 6367 device_compiler.h:208] Compiled cluster")
True
>>> is_log_noise("ValueError: something the user must see")
False
"""
import contextlib
import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import tempfile
import threading

__all__ = ["VERBOSE_ENV", "verbose", "quiet", "is_log_noise", "without_noise",
           "start_tensorflow", "quiet_tensorflow_start"]

VERBOSE_ENV = "SPATIAL_TF_VERBOSE"

# glog/absl line prefixes: severity I or W, date, time, thread id, file:line]
_LOG_LINE = re.compile(rb"^[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./-]+:\d+\] ")
_NOISE = (
    re.compile(rb"^WARNING: All log messages before absl::InitializeLog\(\) is called"),
    re.compile(rb"^To enable the following instructions: .* rebuild TensorFlow"),
    # a CUDA build of TensorFlow on a machine without a GPU says so as an error line
    re.compile(rb"^E\d{4} [\d:. ]+ +\d+ cuda_platform\.cc:\d+\] failed call to cuInit"),
)
_PY_LOGGERS = ("absl", "tensorflow", "jax")
# XLA's slow-operation alarm ("Constant folding an instruction is taking > 1s", "The
# operation took 2.1s") is an error-level line followed by the instruction and a
# paragraph of advice, ending with the line below: one block, dropped whole
_ALARM = re.compile(rb"^E\d{4} [\d:. ]+ +\d+ slow_operation_alarm\.cc:\d+\] ")
_ALARM_END = re.compile(rb"^If you'd like to file a bug")

_lock = threading.RLock()
_depth = 0


def verbose():
    """True when ``SPATIAL_TF_VERBOSE`` is set to 1 / true / yes / on."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def is_log_noise(line):
    """True for a TensorFlow / XLA info or warning log line (``str`` or ``bytes``)."""
    if isinstance(line, str):
        line = line.encode("utf-8", "replace")
    return bool(_LOG_LINE.match(line)) or any(p.match(line) for p in _NOISE)


class _BelowError(logging.Filter):
    def filter(self, record):
        return record.levelno >= logging.ERROR


@contextlib.contextmanager
def quiet():
    """Hide TensorFlow / XLA info and warning log lines printed inside the block.

    Re-entrant; a no-op when ``SPATIAL_TF_VERBOSE=1``. Other output written to stderr
    inside the block is written back when it ends.
    """
    global _depth
    if verbose():
        yield
        return
    with _lock:
        _depth += 1
        outermost = _depth == 1
    try:
        if not outermost:
            yield
            return
        with _python_loggers_filtered(), _stderr_filtered():
            yield
    finally:
        with _lock:
            _depth -= 1


@contextlib.contextmanager
def _python_loggers_filtered():
    flt = _BelowError()
    loggers = [logging.getLogger(name) for name in _PY_LOGGERS]
    for logger in loggers:
        logger.addFilter(flt)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(flt)


@contextlib.contextmanager
def _stderr_filtered():
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable file descriptor 2
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = without_noise(sink.read().splitlines(keepends=True))
            if kept:
                os.write(2, b"".join(kept))


def without_noise(lines):
    """``lines`` (bytes) less TensorFlow's and XLA's log noise: info and warning lines,
    and XLA's slow-operation alarms with the paragraph each carries.

    >>> alarm = [b"E1127 09:34:34.858641 5551 slow_operation_alarm.cc:73] Constant folding",
    ...          b"  %reduce.5 = f32[] reduce(...)", b"This isn't necessarily a bug;",
    ...          b"If you'd like to file a bug, run with envvar XLA_FLAGS=...", b"kept"]
    >>> without_noise(alarm)
    [b'kept']
    """
    kept, in_alarm = [], False
    for line in lines:
        if _ALARM.match(line):
            in_alarm = True
        elif in_alarm:
            in_alarm = not _ALARM_END.match(line)
        elif not is_log_noise(line):
            kept.append(line)
    return kept


def start_tensorflow():
    """Import TensorFlow and start its runtime inside ``quiet()``; return the module.

    For command-line entry points, whose TensorFlow start-up lines are spatial_tf's own.
    """
    with quiet():
        import tensorflow as tf

        tf.config.list_logical_devices()
    return tf


# TensorFlow's own switch for its C++ log lines: 2 keeps errors, drops info and warnings
TF_LOG_ENV = "TF_CPP_MIN_LOG_LEVEL"


def quiet_tensorflow_start() -> bool:
    """Make a later ``import tensorflow`` as quiet as the command line's; return whether it
    will be.

    Unless ``SPATIAL_TF_VERBOSE=1`` or ``TF_CPP_MIN_LOG_LEVEL`` is set (the user's choice)
    or TensorFlow is imported already: sets ``TF_CPP_MIN_LOG_LEVEL=2`` (TensorFlow's C++
    info and warning lines off, errors kept) and runs the first ``import tensorflow`` inside
    ``quiet()``, which drops the start-up lines that setting does not (the oneDNN notice).
    Imports nothing itself.
    """
    if verbose() or TF_LOG_ENV in os.environ or "tensorflow" in sys.modules:
        return False
    os.environ[TF_LOG_ENV] = "2"
    if not any(isinstance(f, _QuietImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport("tensorflow"))
    return True


class _QuietImport(importlib.abc.MetaPathFinder):
    """Finds module ``name`` as the other finders do, once, and executes it in ``quiet()``."""

    def __init__(self, name):
        self.name = name

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once: the real finders take it from here
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    """``loader``, its module executed inside ``quiet()``; the module keeps ``loader``."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self.loader
        module.__spec__.loader = self.loader
        with quiet():
            self.loader.exec_module(module)
