"""XLA:TPU as a compile-only target: TPU generations and slices read as targets and
checked (``tpu_compile``), the TPU compiler's worker process (``_xla_tpu``), the step
compiled for a TPU (``compiled_step``: ``TpuCompiledStep``), its predicted step time
(``step_time``) and how long such compiles took before (``compile_times``). It sits on
``xla`` only.
"""
import functools

from spatial_tf.emulator import submodule

# the modules here are attributes of the package, imported on first use
__getattr__ = functools.partial(submodule, __name__)
