"""Reference Keras 3 models for spatially partitioned training.

>>> unet3d((16, 16, 16, 1), depth=2, base_filters=4).output_shape
(None, 16, 16, 16, 2)
>>> unet3d((16, 16, 16, 1), depth=2, base_filters=4,
...        options=UNetOptions(norm_momentum=0.9)).get_layer("bottom_bn1").momentum
0.9
"""
from spatial_tf.models.precision import default_dtype_policy
from spatial_tf.models.retinanet import RetinaNetOptions, retinanet
from spatial_tf.models.sliding_window import sliding_window_predict, tile_positions
from spatial_tf.models.unet3d import UNetOptions, output_size, unet, unet3d
from spatial_tf.models import unet3d_presets
from spatial_tf.models.unet3d_presets import ModelGardenUNetOptions, model_garden_unet3d
from spatial_tf.models.video import video_classifier

# spatial_tf.models.unet3d_presets (PRESETS) is importable; docs/models.md has its table
__all__ = ["unet3d", "unet", "UNetOptions", "output_size", "retinanet", "RetinaNetOptions",
           "default_dtype_policy", "model_garden_unet3d", "ModelGardenUNetOptions",
           "sliding_window_predict", "tile_positions", "video_classifier"]
