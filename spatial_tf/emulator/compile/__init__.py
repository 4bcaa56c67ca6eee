"""The compile path: trace a step into one XLA program (``trace``, ``tpu.outside_compilation``
inside it: ``host_ops``), then ``lower(...).compile(target=None)`` (``compiled``): XLA:CPU
for the emulator's cores (``xla``), or a compile-only target such as XLA:TPU (``tpu``).
It sits on ``xla``, ``tpu`` and ``summaries``; running for every replica is
``distribute``'s, the report and ``compare`` are ``diagnose``'s.

``errors``, ``compile_cache``, ``tpu_compile`` and ``step_time`` were modules here before
they moved to ``xla`` and ``tpu``; those paths work for one release and warn.
"""
from spatial_tf.emulator import exported

# public name -> the module that defines it: what other packages import from here
_EXPORTS = {
    "CallSignature": "spatial_tf.emulator.compile.trace",
}

__all__ = sorted(_EXPORTS)

# these names and the modules here are attributes of the package, imported on first use
__getattr__ = exported(__name__, _EXPORTS)
