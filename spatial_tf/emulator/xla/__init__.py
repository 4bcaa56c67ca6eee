"""The door to XLA, the emulator's lowest part: jax (``_xla``, the only module that
imports it), XLA:CPU programs compiled and run for a number of cores (``executable``:
memory kinds and the peak formula), several replicas' programs (``replicas``), float64
references (``precision``), the compile cache, XLA's errors in TensorFlow's terms
(``errors``), variables reached by handle (``handles``) and the one reader of HLO text
(``hlo_text``). It imports no other part of the emulator.
"""
import functools

from spatial_tf.emulator import submodule

# the modules here are attributes of the package, imported on first use
__getattr__ = functools.partial(submodule, __name__)
