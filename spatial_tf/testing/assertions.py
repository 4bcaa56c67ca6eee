"""Assertions about a partitioned step, for tests: same results, no reassembled activations.

Both compile the step on the emulator given; their failure message is the table a user
needs (``Emulator.compare``'s or ``Emulator.report``'s).

>>> import tensorflow as tf, spatial_tf
>>> emulator = spatial_tf.Emulator(num_cores_per_replica=2)
>>> w = tf.Variable(tf.ones([3, 3, 1, 1]))
>>> def step(x):
...     x = spatial_tf.split(x, [1, 2, 1, 1])
...     return tf.reduce_sum(tf.nn.conv2d(x, w, 1, "SAME"))
>>> report = assert_no_activation_gather(emulator, step, (tf.ones([1, 8, 8, 1]),))
>>> "collective-permute" in report.by_kind()      # a halo exchange, no gather
True
"""
from spatial_tf.emulator.diagnose import display_name
from spatial_tf.table import format_bytes, plural

__all__ = ["assert_partitioned_matches", "assert_no_activation_gather", "assert_fits_tpu"]


def _check_emulator(emulator, where):
    from spatial_tf.emulator import Emulator

    if not isinstance(emulator, Emulator):
        raise TypeError(
            f"{where}: emulator is {type(emulator).__name__}; expected a "
            f"spatial_tf.Emulator. Fix: use the 'emulator' fixture or "
            f"spatial_tf.Emulator(num_cores_per_replica=...)."
        )


def assert_partitioned_matches(emulator, step, args=(), kwargs=None, *, tolerances=None,
                               reference="unpartitioned"):
    """Assert ``step(*args, **kwargs)`` gives the same results partitioned as not.

    Runs ``emulator.compare``: every output and variable update of the partitioned
    program against ``reference`` within each dtype's tolerance (``tolerances``
    overrides them, e.g. ``{"float32": 1e-4}``). Variables are left unchanged.
    Returns the ``Comparison``; raises ``ParityError`` (an ``AssertionError``) whose
    message is the comparison table.
    """
    __tracebackhide__ = True  # pytest shows the failing test's line, then the table
    from spatial_tf.emulator.diagnose import ParityError

    _check_emulator(emulator, "assert_partitioned_matches")
    comparison = emulator.compare(step, args, kwargs, reference=reference,
                                  tolerances=tolerances)
    if not comparison.ok:
        raise ParityError(comparison)
    return comparison


def assert_no_activation_gather(emulator, step, args=(), kwargs=None, *,
                                gather_threshold_bytes=None):
    """Assert XLA does not reassemble an activation-sized tensor in ``step``.

    Runs ``emulator.report``: no all-gather or all-to-all of at least
    ``gather_threshold_bytes`` per core (default: an eighth of the smallest per-core
    piece of a split argument), nor frames of that size taken one at a time from a split
    axis and sent to every core (Keras' ``TimeDistributed``). Returns the ``Report``;
    raises ``AssertionError`` with the report's warnings and tables.
    """
    __tracebackhide__ = True
    _check_emulator(emulator, "assert_no_activation_gather")
    report = emulator.report(step, args, kwargs, gather_threshold_bytes=gather_threshold_bytes)
    if report.warnings:
        raise AssertionError(
            f"{display_name(report.function)}: "
            f"{plural(len(report.warnings), 'activation-sized gather')} on {emulator!r}; the "
            f"split does not survive these ops:\n{report}"
        )
    return report


def assert_fits_tpu(emulator, step, args=(), kwargs=None, *, target=None, max_bytes=None):
    """Assert XLA's TPU compiler fits the partitioned ``step`` in one core of ``target``.

    ``target`` (default: the emulator's ``target``) is a TPU generation such as
    ``"v5e"``; the step is compiled for the emulator's cores per replica by the TPU
    compiler (libtpu, compile-only; ``pip install "spatial-tf[tpu-compile]"``), which
    refuses a program that does not fit the core's HBM. ``max_bytes``: also require the
    compiler's per-core peak to be at most this. Returns the ``TpuCompiledStep``; raises
    ``AssertionError`` with the compiler's verdict and the emulator's report.
    """
    __tracebackhide__ = True
    _check_emulator(emulator, "assert_fits_tpu")
    target = target if target is not None else emulator.target
    if target is None:
        raise ValueError(
            "assert_fits_tpu: no target; expected a TPU generation, from target= or "
            "the emulator's. Fix: assert_fits_tpu(emulator, step, args, target='v5e') or "
            "spatial_tf.Emulator(..., target='v5e').")
    on_tpu = emulator.compile(step, args, kwargs, target=target)
    peak = on_tpu.memory()["peak"] if on_tpu.fits else None
    if not on_tpu.fits or (max_bytes is not None and peak > max_bytes):
        limit = "" if max_bytes is None else f" (limit {format_bytes(max_bytes)} per core)"
        raise AssertionError(
            f"{display_name(on_tpu.traced.name)} on "
            f"{plural(emulator.num_cores_per_replica, 'core')} of TPU {on_tpu.target.name}: "
            f"{on_tpu.verdict()}{limit}; {on_tpu.source}.\n"
            f"{emulator.report(step, args, kwargs, target=target)}"
        )
    return on_tpu
