"""Run spatially partitioned step functions on virtual CPU devices with XLA's SPMD partitioner.

``Emulator`` stands where a custom training loop uses ``TPUStrategy``; ``report`` shows
per-core memory and communication, ``compare`` checks the partitioned run against the
unpartitioned one. jax/jaxlib (``pip install "spatial-tf[emulator]"``) are imported at
the first ``Emulator``; ``configure`` sets how many virtual devices jax starts with.
Names are imported on first use, so the TPU compiler's worker process
(``spatial_tf.emulator.tpu._xla_tpu``) starts without TensorFlow.

>>> import tensorflow as tf, spatial_tf
>>> from spatial_tf.emulator import Emulator
>>> emulator = Emulator(num_cores_per_replica=2)
>>> step = lambda x: tf.reduce_sum(spatial_tf.split(x, [1, 2]) ** 2)
>>> float(emulator.run(step, args=(tf.ones([4, 8]),)))
32.0
"""
import functools
import importlib
import os
import warnings

from spatial_tf import frames

# the emulator's frames (tracing, replica contexts, host calls) are never the user's line
frames.register_exclusion(os.path.dirname(__file__))

__all__ = ["Emulator", "configure", "CompileError"]

# public name -> module that defines it
_EXPORTS = {
    "Emulator": "spatial_tf.emulator.distribute.strategy",
    "CompileError": "spatial_tf.emulator.xla.errors",
    "configure": "spatial_tf.emulator.xla._xla",
    "DEFAULT_CPU_DEVICES": "spatial_tf.emulator.xla._xla",
    "DEVICES_ENV": "spatial_tf.emulator.xla._xla",
}


def submodule(package: str, name: str):
    """``package.name`` imported on first use, as an attribute of ``package``
    (``spatial_tf.emulator.tpu.tpu_compile`` after ``import spatial_tf``); an
    ``AttributeError`` when there is no such module."""
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{package}.{name}":
            raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None


def exported(package: str, names: dict):
    """``package``'s ``__getattr__``: a name of ``names`` (name -> the module that defines
    it) from that module, and any other name as ``package``'s module of that name
    (``submodule``), each imported on first use. A name is read from its module each time
    (not kept in ``package``), so a function-level import sees the module's current value,
    one a test replaced included."""
    def __getattr__(name):
        module = names.get(name)
        if module is None:
            return submodule(package, name)
        return getattr(importlib.import_module(module), name)

    return __getattr__


def moved(old: str, new: str):
    """For a module left at its old path ``old``: warn that it moved to ``new`` (the old
    path works for one release), and return the old module's ``__getattr__``, which
    answers with ``new``'s names."""
    warnings.warn(
        f"{old} moved to {new}; the old path works for one release. Fix: import from "
        f"{new}.", DeprecationWarning, stacklevel=3)
    return functools.partial(getattr, importlib.import_module(new))


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:  # a subpackage: spatial_tf.emulator.compile, .diagnose, ...
        return submodule(__name__, name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
