"""spatial_tf: spatial partitioning for TensorFlow 2 on TPU, emulated on CPU.

Describe how each input tensor is split over the cores of a replica, apply it in a
``tf.function`` step, and run the same step on TPU or on virtual CPU cores.

>>> import spatial_tf, tensorflow as tf
>>> batch = {"image": tf.zeros([2, 64, 64, 3]), "label": tf.zeros([2])}
>>> spatial_tf.validate(batch, {"image": [1, 4, 1, 1], "label": None}, 4)
{'image': Tile(1, 4, 1, 1), 'label': Replicate()}

Names and subpackages (``spatial_tf.topology``, ``spatial_tf.emulator``, ...) are
imported on first use, so ``import spatial_tf`` is cheap and TensorFlow's logging can be
configured before TensorFlow loads. ``import spatial_tf`` does configure it when you have
not: TensorFlow imported afterwards starts without its C++ start-up lines (the oneDNN and
CPU-instruction notices), as on the command line. To see them, set
``SPATIAL_TF_VERBOSE=1`` or ``TF_CPP_MIN_LOG_LEVEL`` (e.g. 0) before ``import spatial_tf``.

>>> spatial_tf.topology.synthetic("v3-8").name
'v3-8'
"""
import importlib

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    "Tile": "spatial_tf.spec",
    "PartialTile": "spatial_tf.spec",
    "Replicate": "spatial_tf.spec",
    "Assign": "spatial_tf.spec",
    "validate": "spatial_tf.spec",
    "flatten_with_paths": "spatial_tf.spec",
    "split": "spatial_tf.annotate",
    "summary": "spatial_tf.summarize",
    "virtual_cpus": "spatial_tf.devices",
    "tpu_strategy": "spatial_tf.strategy",
    "auto": "spatial_tf.strategy",
    "TPUUnavailableError": "spatial_tf.strategy",
    "TPUError": "spatial_tf.strategy",
    "Error": "spatial_tf.error",
    "describe": "spatial_tf.topology",
    "Emulator": "spatial_tf.emulator",
    "CompileError": "spatial_tf.emulator.xla.errors",
    "ParityError": "spatial_tf.emulator.diagnose.parity",
    "plan": "spatial_tf.planning",
}

# subpackages reachable as ``spatial_tf.<name>`` after a plain ``import spatial_tf``,
# imported on first use; a new subpackage only needs its name added here.
_SUBPACKAGES = ("spec", "topology", "emulator", "models", "data", "layers", "losses",
                "metrics", "train", "testing", "devices", "commands", "detection",
                "planning", "viz", "resize")

__all__ = sorted(_EXPORTS) + list(_SUBPACKAGES)


def __getattr__(name):
    if name in _SUBPACKAGES:
        _require_tensorflow()
        return importlib.import_module(f"spatial_tf.{name}")  # the import binds it here
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spatial_tf' has no attribute {name!r}")
    _require_tensorflow()
    imported = importlib.import_module(module)
    value = getattr(imported, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBPACKAGES))


def _require_tensorflow():
    try:
        from spatial_tf import logs

        with logs.quiet():  # TensorFlow's start-up log lines (SPATIAL_TF_VERBOSE=1 shows them)
            import tensorflow  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "spatial_tf needs TensorFlow (2.16 to 2.21), which is not installed. Fix: "
            "pip install 'spatial-tf[cpu]' on a CPU machine, 'spatial-tf[gpu]' with CUDA; "
            "on a Cloud TPU VM keep its tensorflow-tpu build and install 'spatial-tf[tpu]'."
        ) from e


def _quiet_start():
    """TensorFlow, when imported after this package, starts as quietly as the command line
    (``spatial_tf.logs.quiet_tensorflow_start``; imports no TensorFlow)."""
    importlib.import_module("spatial_tf.logs").quiet_tensorflow_start()


_quiet_start()
