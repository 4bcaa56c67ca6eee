"""The door to XLA, the emulator's lowest part: jax (``_xla``, the only module that
imports it), XLA:CPU programs compiled and run for a number of cores (``executable``:
memory kinds and the peak formula), several replicas' programs (``replicas``), float64
references (``precision``), the compile cache, XLA's errors in TensorFlow's terms
(``errors``), variables reached by handle (``handles``) and the one reader of HLO text
(``hlo_text``). It imports no other part of the emulator.
"""
from spatial_tf.emulator import exported

# public name -> the module that defines it: what other packages import from here
_EXPORTS = {
    "MEMORY_KINDS": "spatial_tf.emulator.xla.executable",
    "INSTRUCTION": "spatial_tf.emulator.xla.hlo_text",
    "arrays": "spatial_tf.emulator.xla.hlo_text",
    "element_bytes": "spatial_tf.emulator.xla.hlo_text",
}

__all__ = sorted(_EXPORTS)

# these names and the modules here are attributes of the package, imported on first use
__getattr__ = exported(__name__, _EXPORTS)
