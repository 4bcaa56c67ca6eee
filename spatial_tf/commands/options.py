"""Argument types and the parser class shared by the commands: bad values stop at parsing.

Each type turns the text of one option into a value or raises ``ArgumentTypeError``
with the value and what is allowed; ``Parser`` prints argparse's error as one line and
exits with status 2, before any TensorFlow is imported.

>>> positive_int(1, 10)("3")
3
>>> power_of_two("-4")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: -4 is not allowed; expected a power of two from 1 to 128 (1, 2, 4, 8, 16, 32, 64, 128)
"""
import argparse
import math
import sys

from spatial_tf.checks import CORE_COUNTS  # kept importable from here

__all__ = ["Parser", "positive_int", "power_of_two", "int_list", "momentum", "CORE_COUNTS",
           "spacing", "add_unet_options", "add_modality_option", "check_batch", "DTYPE_POLICIES",
           "UNET_PRESETS", "MODALITIES", "DEFAULT_BN_MOMENTUM", "resolve_unet_preset",
           "DEVICES", "add_device_option", "resolve_cores"]

# the unet3d training command's --dtype-policy choices (Keras dtype policy names)
DTYPE_POLICIES = ("float32", "mixed_bfloat16")
# --preset NAME -> its --depth and --filters (spatial_tf.models.unet3d_presets' table, kept
# here so that parsing imports no Keras; None: spatial_tf's own U-Net)
UNET_PRESETS = {None: (3, 8), "model_garden": (4, 32)}
# --modality choices: spatial_tf.data.MODALITIES' keys (kept here: parsing imports no
# TensorFlow)
MODALITIES = ("ct", "mr", "other")
# --device choices: where train, evaluate and predict run their steps
DEVICES = ("auto", "tpu", "cpu")
# --bn-momentum of a new model dir: batch norm's moving statistics follow a run of a few
# hundred steps (Keras' 0.99 lags so far behind that evaluation disagrees with training)
DEFAULT_BN_MOMENTUM = 0.9

class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors are one line on stderr (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int(text):
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(low=1, high=None):
    """An int type allowing ``low`` to ``high`` (no upper bound if None)."""

    def parse(text):
        value = _int(text)
        if value < low or (high is not None and value > high):
            allowed = f"an integer from {low} to {high}" if high else f"an integer >= {low}"
            raise argparse.ArgumentTypeError(f"{value} is not allowed; expected {allowed}")
        return value

    parse.__name__ = "int"  # argparse names the type in its own messages
    return parse


def power_of_two(text):
    """Cores per replica: 1, 2, 4, ..., 128."""
    value = _int(text)
    if value not in CORE_COUNTS:
        raise argparse.ArgumentTypeError(
            f"{value} is not allowed; expected a power of two from 1 to {CORE_COUNTS[-1]} "
            f"({', '.join(map(str, CORE_COUNTS))})"
        )
    return value


power_of_two.__name__ = "int"


def momentum(text: str) -> float:
    """A batch-norm momentum: a number from 0 to 1, 1 excluded.

    >>> momentum("0.9")
    0.9
    """
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; expected a number from 0 "
                                         f"to 1, 1 excluded, e.g. 0.9")
    return value


momentum.__name__ = "number"


def spacing(text: str) -> list[float]:
    """A voxel spacing in mm: ``D,H,W`` or one number for all three axes.

    >>> spacing("4"), spacing("0.8,0.8,2.5")
    ([4.0, 4.0, 4.0], [0.8, 0.8, 2.5])
    """
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) not in (1, 3) or not all(0 < v < float("inf") for v in values):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; expected a voxel spacing "
                                         f"in mm: D,H,W positive numbers such as 1.5,1.5,3, or "
                                         f"one such as 2 for all three axes")
    return values * 3 if len(values) == 1 else values


spacing.__name__ = "spacing"


def int_list(length, example=None):
    """Comma-separated positive ints: exactly ``length`` of them (an int or a tuple of the
    lengths allowed); ``example`` is the value error messages suggest."""
    lengths = (length,) if isinstance(length, int) else tuple(length)

    def parse(text):
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            values = None
        if values is None or len(values) not in lengths or any(v < 1 for v in values):
            suggested = example or {4: "2,2,1,2", 5: "1,2,2,2,1"}.get(
                lengths[0], ",".join(["2"] * lengths[0]))
            count = " or ".join(map(str, lengths))
            raise argparse.ArgumentTypeError(
                f"expected {count} comma-separated positive ints such as {suggested}; "
                f"got {text!r}"
            )
        return values

    parse.__name__ = "ints"
    return parse


def add_unet_options(parser, training=False):
    """``--classes``, ``--depth``, ``--filters``: the 3D U-Net's options (train, plan);
    with ``training``, ``--dtype-policy`` too."""
    parser.add_argument("--classes", type=positive_int(2, 256), default=3, metavar="N",
                        help="classes, background included (default 3)")
    by_preset = ", or the --preset's" if training else ""
    parser.add_argument("--depth", type=positive_int(1, 8), default=None if training else 3,
                        metavar="N", help=f"U-Net levels (default 3{by_preset})")
    parser.add_argument("--filters", type=positive_int(1, 1024),
                        default=None if training else 8, metavar="N",
                        help=f"filters of the first level, doubled per level (default "
                             f"8{by_preset})")
    if training:
        parser.add_argument("--preset", choices=[p for p in UNET_PRESETS if p], metavar="NAME",
                            help="unet3d: a published configuration instead of spatial_tf's "
                                 "U-Net: model_garden (Model Garden's volumetric 3D U-Net: "
                                 "4 levels, 32 filters; --depth and --filters override them)")
        parser.add_argument("--dtype-policy", choices=DTYPE_POLICIES, metavar="POLICY",
                            help="unet3d: Keras dtype policy of the layers (logits stay "
                                 "float32): float32 or mixed_bfloat16 (float32 variables, "
                                 "bfloat16 compute). Default: the one the --model-dir was "
                                 "trained with, else mixed_bfloat16 on TPU, float32 elsewhere")


def add_modality_option(parser: argparse.ArgumentParser, training: bool = False) -> None:
    """``--modality``: how volume intensities are scaled (train records it; evaluate and
    predict take the recorded one and refuse another)."""
    if training:
        text = ("unet3d: how volume intensities are scaled: ct (Hounsfield units, abdominal "
                "window -160 to 240 scaled to [0, 1]; the default), mr (each volume's 1st to "
                "99th percentile scaled to [0, 1], clipped outside) or other (as they are). "
                "Recorded in model.json; evaluate and predict reuse it")
    else:
        text = ("unet3d: the --modality the model was trained with (default: the one "
                "MODEL_DIR/model.json records; another one is refused)")
    parser.add_argument("--modality", choices=MODALITIES, metavar="ct|mr|other", help=text)


def add_device_option(parser: argparse.ArgumentParser, one_core: str = "") -> None:
    """``--device auto|tpu|cpu``: where the steps run (train, evaluate, predict);
    ``one_core`` says what ``--cores 1`` does when it differs."""
    parser.add_argument("--device", choices=DEVICES, default="auto", metavar="auto|tpu|cpu",
                        help="where the steps run: auto (the default) uses a TPU when one is "
                             "found, else the CPU emulator, saying so in one line on stderr; "
                             "tpu stops with an error when there is none; cpu runs on the "
                             "CPU emulator without that line. --cores says how many cores, "
                             f"not which device{one_core}")


def add_nonfinite_option(parser: argparse.ArgumentParser) -> None:
    """``--nonfinite VALUE``: what NaN or infinite voxels of an input volume become
    (default: such a volume is refused, naming the file and the count)."""
    parser.add_argument("--nonfinite", type=float, metavar="VALUE",
                        help="unet3d: replace NaN or infinite voxels of the input volumes by "
                             "VALUE, saying how many (default: refuse such a volume, naming "
                             "the file)")


def resolve_unet_preset(args):
    """Fill ``--depth`` and ``--filters`` left out from ``--preset`` (or 3 and 8).

    >>> args = argparse.Namespace(preset="model_garden", depth=None, filters=16)
    >>> resolve_unet_preset(args); (args.depth, args.filters)
    (4, 16)
    """
    depth, filters = UNET_PRESETS[args.preset]
    args.depth = depth if args.depth is None else args.depth
    args.filters = filters if args.filters is None else args.filters


def resolve_cores(parser, args, default_spec, default_cores=8):
    """Fill ``--cores`` and ``--spec`` left out: ``--spec`` alone sets ``--cores`` to its
    product, ``--cores`` alone (or neither: ``default_cores``) sets ``--spec`` to
    ``default_spec(cores)``. Given both, their product must agree; a product that is no
    core count, or two that disagree, stop here like argparse (exit 2), naming what was
    typed.

    >>> args = argparse.Namespace(cores=None, spec=[1, 4, 4, 1, 1])
    >>> resolve_cores(None, args, None); args.cores
    16
    """
    if args.spec is None:
        args.cores = default_cores if args.cores is None else args.cores
        args.spec = default_spec(args.cores)
        return
    shown, product = ",".join(map(str, args.spec)), math.prod(args.spec)
    if args.cores is None and product not in CORE_COUNTS:
        nearest = max(c for c in CORE_COUNTS if c <= product)
        parser.error(f"argument --spec: {shown} splits over {product} cores; expected split "
                     f"counts whose product is a power of two from 1 to {CORE_COUNTS[-1]} "
                     f"(the cores per replica), e.g. {','.join(map(str, default_spec(nearest)))}")
    if args.cores is None:
        args.cores = product
    elif product != args.cores:
        instead = f", or leave --cores out to split over {product}" if product in CORE_COUNTS \
            else ""
        parser.error(f"argument --spec: {shown} (product {product}) is not allowed with --cores "
                     f"{args.cores}; expected split counts whose product is {args.cores}. Fix: "
                     f"e.g. --spec {','.join(map(str, default_spec(args.cores)))}{instead}")


def check_batch(parser, args):
    """Default ``--batch`` to one example per batch piece and replica; else it must be a
    multiple of ``--replicas`` times the spec's batch split (exit 2 like argparse)."""
    if args.batch is None:
        args.batch = args.replicas * args.spec[0]
    if args.batch % args.replicas or (args.batch // args.replicas) % args.spec[0]:
        step = args.replicas * args.spec[0]
        parser.error(f"argument --batch: {args.batch} is not allowed with --replicas "
                     f"{args.replicas} and a batch split of {args.spec[0]}; expected a "
                     f"multiple of {step}, e.g. --batch {step}")


def fail(prog, message):
    """Print a library error as the parser would and return exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2
