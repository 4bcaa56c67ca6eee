"""Diagnosis: what a partitioned step costs per core (``report``), whether partitioning
changes its results (``compare``), and the user's line and fix for each gather. It reads
compiled steps (``compile``) and HLO text (``xla``), and is called by ``Emulator``
(``distribute``), which sits above it.

``hlo_text`` was a module here before it moved to ``xla``; that path works for one
release and warns.
"""
from spatial_tf.emulator import exported

# public name -> the module that defines it: what other packages import from here
_EXPORTS = {
    "ParityError": "spatial_tf.emulator.diagnose.parity",
    "display_name": "spatial_tf.emulator.diagnose.report",
}

__all__ = sorted(_EXPORTS)

# these names and the modules here are attributes of the package, imported on first use
__getattr__ = exported(__name__, _EXPORTS)
