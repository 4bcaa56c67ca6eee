"""Input pipelines and synthetic data."""
from spatial_tf.data.synthetic import segmentation_dataset

__all__ = ["segmentation_dataset"]
