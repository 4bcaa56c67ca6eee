"""Input pipelines, readers, CT and MR intensities, resampling to a voxel spacing, padding
and cropping with masks, synthetic data, and detection data: synthetic shape images, COCO
annotations, box-aware augmentation.

>>> from spatial_tf import data
>>> image, labels = data.synthetic_ct((8, 8, 8), seed=0)
>>> padded, mask = data.pad_to_multiple(labels, [3, 1, 1], channel_axis=None)
>>> padded.shape.as_list(), int(mask.numpy().sum())
([9, 8, 8], 512)
"""
from spatial_tf.data.augment import augment, augment_dataset, flip_horizontal, scale_and_crop
from spatial_tf.data.checking import check_volumes, volume_dataset, with_progress
from spatial_tf.data.coco import CocoData, coco_dataset, load_coco, write_coco
from spatial_tf.data.ct import class_names, synthetic_ct, synthetic_ct_dataset
from spatial_tf.data.dicom import DicomVolume, read_dicom_series
from spatial_tf.data.fitting import (crop_or_pad, fit_examples, fit_shape, pad_to_shape,
                                     split_multiples)
from spatial_tf.data.images import (DETECTION_CLASSES, synthetic_detection_dataset,
                                     synthetic_detection_image)
from spatial_tf.data.intensity import (MODALITIES, WINDOWS, normalize, percentile_scale,
                                      scale_intensities, window)
from spatial_tf.data.padding import pad_to_multiple
from spatial_tf.data.pipeline import check_static, distribute
from spatial_tf.data.resampling import (resample_to_shape, resample_to_spacing,
                                       resampled_affine, resampled_shape)
from spatial_tf.data.readers import (DICOM, EXTENSIONS, file_axes, finite, from_ras,
                                    in_file_order, labels_of, load_example, nifti_space,
                                    read_labels, read_volume, shapes_compared, stored_shape,
                                    to_ras, volume_format, volume_shape, voxel_spacing,
                                    write_volume)
from spatial_tf.data.synthetic import MOVING_SQUARES_CLASSES, moving_squares, segmentation_dataset
from spatial_tf.data.tfrecords import FEATURES, tfrecord_dataset, write_tfrecords

__all__ = [
    "CocoData", "DETECTION_CLASSES", "DICOM", "DicomVolume", "EXTENSIONS", "FEATURES",
    "MODALITIES", "MOVING_SQUARES_CLASSES", "WINDOWS",
    "augment",
    "augment_dataset", "check_static", "check_volumes", "class_names", "coco_dataset",
    "crop_or_pad", "distribute", "file_axes", "finite", "fit_examples", "fit_shape",
    "flip_horizontal", "from_ras", "in_file_order", "labels_of", "load_coco", "load_example",
    "moving_squares", "nifti_space", "normalize",
    "pad_to_multiple", "pad_to_shape", "percentile_scale", "read_dicom_series", "read_labels",
    "read_volume",
    "resample_to_shape", "resample_to_spacing", "resampled_affine", "resampled_shape",
    "scale_and_crop", "scale_intensities", "segmentation_dataset", "shapes_compared",
    "split_multiples", "stored_shape", "synthetic_ct",
    "synthetic_ct_dataset", "synthetic_detection_dataset", "synthetic_detection_image",
    "tfrecord_dataset", "to_ras", "voxel_spacing", "volume_dataset", "volume_format",
    "volume_shape", "window", "with_progress", "write_coco", "write_tfrecords", "write_volume",
]
