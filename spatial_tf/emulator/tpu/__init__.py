"""XLA:TPU as a compile-only target: TPU generations and slices read as targets and
checked (``tpu_compile``), the TPU compiler's worker process (``_xla_tpu``), the step
compiled for a TPU (``compiled_step``: ``TpuCompiledStep``), its predicted step time
(``step_time``), how long such compiles took before (``compile_times``) and what fills
its temp memory at the peak (``buffers``, from the compiler's dump). It sits on ``xla``
only.
"""
from spatial_tf.emulator import exported

# public name -> the module that defines it: what other packages import from here
_EXPORTS = {
    "TpuTarget": "spatial_tf.emulator.tpu.tpu_compile",
    "check_compiler": "spatial_tf.emulator.tpu.tpu_compile",
    "compiler_name": "spatial_tf.emulator.tpu.tpu_compile",
    "libtpu_version": "spatial_tf.emulator.tpu.tpu_compile",
    "tpu_target": "spatial_tf.emulator.tpu.tpu_compile",
    "NoStepTime": "spatial_tf.emulator.tpu.step_time",
    "SOURCE": "spatial_tf.emulator.tpu.step_time",
    "seconds_text": "spatial_tf.emulator.tpu.step_time",
}

__all__ = sorted(_EXPORTS)

# these names and the modules here are attributes of the package, imported on first use
__getattr__ = exported(__name__, _EXPORTS)
