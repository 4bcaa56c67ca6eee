"""spatial_tf: spatial partitioning for TensorFlow 2 on TPU, emulated on CPU.

Describe how each input tensor is split over the cores of a replica, apply it in a
``tf.function`` step, and run the same step on TPU or on virtual CPU cores.
"""

__version__ = "0.1.0"
