"""Batch norm over the real voxels only, or over the padding too: held-out Dice on a real MRI.

The MNI152 template nilearn ships (T1 and its gray/white-matter maps, no download), as
``notebooks/real_mri_segmentation.ipynb`` uses it: the posterior part (y < 117) trains
``python -m spatial_tf train unet3d --modality mr --spacing 4 --cores 8``, the anterior
part is held out. The 4 mm volume is 49x29x47 (training part), padded to 56x32x48 for the
split and the poolings (what ``train`` prints): 22 % of the training shape is padding. Each row trains the same
model from the same seed, once with ``masked_bn`` (what ``train`` records for a new model
dir) and once with batch norm over every voxel (the model dirs written before), then
``evaluate`` scores the held-out part on its own 1 mm grid; each seed initializes the
weights differently (the data are the same).

    python benchmarks/masked_batch_norm_mri.py [--steps 60,120] [--seeds 0,1,2]
"""
import argparse
import contextlib
import io
import os
import re
import sys
import tempfile

CUT = 117


def _volumes(root):
    import nibabel as nib
    import numpy as np
    from nilearn import datasets

    t1 = datasets.load_mni152_template()
    gray, white = (image.get_fdata() for image in (datasets.load_mni152_gm_template(),
                                                    datasets.load_mni152_wm_template()))
    labels = np.zeros(t1.shape, np.int16)
    labels[(gray >= 0.5) & (gray >= white)] = 1
    labels[(white >= 0.5) & (white > gray)] = 2
    label_image = nib.Nifti1Image(labels, t1.affine, t1.header)
    folders = {}
    for part, cut in {"train": slice(None, CUT), "held_out": slice(CUT, None)}.items():
        folders[part] = os.path.join(root, part)
        os.makedirs(folders[part])
        nib.save(t1.slicer[:, cut, :], os.path.join(folders[part], "mni.nii"))
        nib.save(label_image.slicer[:, cut, :], os.path.join(folders[part], "mni_labels.nii"))
    return folders


@contextlib.contextmanager
def _batch_norm(masked, seed):
    """New model dirs record ``masked_bn`` as given (the train command's choice is True)
    and the weights' ``seed`` (the train command's is 0)."""
    from spatial_tf.commands import train

    original = train._record

    def record(args, shape, existing=None):
        return dict(original(args, shape, existing), masked_bn=masked, seed=seed)

    train._record = record
    try:
        yield
    finally:
        train._record = original


def _run(folders, root, steps, masked, seed):
    from spatial_tf.__main__ import main

    model_dir = os.path.join(root, f"model_{steps}_{masked}_{seed}")
    with _batch_norm(masked, seed), contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["train", "unet3d", "--data", folders["train"], "--modality", "mr",
                     "--spacing", "4", "--cores", "8", "--steps", str(steps),
                     "--checkpoint-every", str(steps), "--model-dir", model_dir,
                     "--no-progress"]) == 0
        progress = float(re.search(r"mean Dice (\d\.\d+)", out.getvalue()).group(1))
        # unpartitioned, as the figures in docs were measured (the default is the 8 cores
        # the model was trained on)
        assert main(["evaluate", "--model-dir", model_dir, "--data", folders["held_out"],
                     "--cores", "1"]) == 0
    rows = dict(re.findall(r"^ +(\d) +(\d\.\d{4})$", out.getvalue(), re.M))
    return progress, float(rows["1"]), float(rows["2"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="60,120", help="training steps, comma-separated")
    parser.add_argument("--seeds", default="0", help="weight seeds, comma-separated")
    args = parser.parse_args(argv)
    from spatial_tf import logs

    logs.start_tensorflow()
    print("| steps | seed | batch norm | progress-bar Dice (training part) | held-out gray "
          "matter | held-out white matter |")
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as root:
        folders = _volumes(root)
        for steps in (int(s) for s in args.steps.split(",")):
            for seed in (int(s) for s in args.seeds.split(",")):
                for masked in (True, False):
                    progress, gray, white = _run(folders, root, steps, masked, seed)
                    how = "real voxels only (`masked_bn`)" if masked else "every voxel"
                    print(f"| {steps} | {seed} | {how} | {progress:.3f} | {gray:.3f} | "
                          f"{white:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
