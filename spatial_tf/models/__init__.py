"""Reference Keras 3 models for spatially partitioned training.

>>> unet3d((16, 16, 16, 1), depth=2, base_filters=4).output_shape
(None, 16, 16, 16, 2)
"""
from spatial_tf.models.precision import default_dtype_policy
from spatial_tf.models.retinanet import retinanet
from spatial_tf.models.sliding_window import sliding_window_predict, tile_positions
from spatial_tf.models.unet3d import output_size, unet, unet3d
from spatial_tf.models import unet3d_presets
from spatial_tf.models.unet3d_presets import model_garden_unet3d

# spatial_tf.models.unet3d_presets (PRESETS) is importable; docs/models.md has its table
__all__ = ["unet3d", "unet", "output_size", "retinanet", "default_dtype_policy",
           "model_garden_unet3d", "sliding_window_predict", "tile_positions"]
