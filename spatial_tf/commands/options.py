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
           "DEVICES", "add_device_option", "resolve_cores", "DEFAULT_CORES", "HelpFormatter",
           "add_command", "add_renamed", "budget", "add_cores_option", "recorded_cores",
           "trained_model_dir", "DOCS"]

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
# --cores of every command where no model dir records the cores its model was trained
# on (demo, describe, plan, a new train); train resuming, evaluate and predict take the
# recorded ones (evaluate and predict: 1, unpartitioned, for a model dir from before the
# record had them, as they did then)
DEFAULT_CORES = 8
# where each command's long explanations are: DOCS#<command>
DOCS = "docs/cli.md"


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors are one line on stderr (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; option help in a column from 26, so that the
    options of every command fit on one line each."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=26)


def add_command(subparsers, name, help, description, epilog="", **kwargs):
    """A command's parser: its one-line ``help``, a short ``description`` (plain text,
    lines as written), ``epilog`` and where its details are (``DOCS#name``)."""
    details = f"Details and examples: {DOCS}#{name} in the spatial_tf repository."
    return subparsers.add_parser(name, help=help, description=description,
                                 epilog=f"{epilog}\n\n{details}" if epilog else details,
                                 formatter_class=HelpFormatter, **kwargs)


class _Renamed(argparse.Action):
    """An option's old name: stored as the new one, with a one-line note on stderr."""

    def __init__(self, option_strings, dest, new, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is now called {self.new}; the old name "
              f"still works in this release only", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_renamed(parser, old, new, **kwargs):
    """Accept ``old``, the name option ``new`` had before, for one release: it sets the
    same value, is not shown in ``--help`` and says its new name on stderr."""
    dest = new.lstrip("-").replace("-", "_")
    parser.add_argument(old, dest=dest, action=_Renamed, new=new, help=argparse.SUPPRESS,
                        **kwargs)


def add_cores_option(parser, trained=None, **kwargs):
    """``--cores N``: cores per replica, 1 to 128. Default ``DEFAULT_CORES``; with
    ``trained`` (the count for a model dir that records none), the model dir's
    (``resolve_cores``, ``trained_model_dir``), so the default here is None."""
    text = (f"cores per replica (default: as trained, else {trained})" if trained else
            f"cores per replica: 1, 2, 4, ..., 128 (default {DEFAULT_CORES})")
    kwargs.setdefault("default", None if trained else DEFAULT_CORES)
    parser.add_argument("--cores", type=power_of_two, metavar="N", help=text, **kwargs)


def recorded_cores(model_dir):
    """The cores per replica ``model_dir``'s model was trained on, as its ``model.json``
    records them; None when there is none, it is older than the record or unreadable
    (the command says what is wrong with it)."""
    from spatial_tf.commands.volumes import read_record

    try:
        record = read_record(model_dir)
    except (ValueError, OSError):
        return None
    cores = record.get("cores") if isinstance(record, dict) else None
    return cores if cores in CORE_COUNTS else None


def trained_model_dir(prog, args):
    """evaluate's and predict's ``--model-dir`` check before TensorFlow loads: 2 after one
    line (``fail``) when it holds no ``model.json`` or a broken one; else a left-out
    ``--cores`` becomes the cores it was trained on (1, unpartitioned as before, for a
    record from before they were recorded) and None is returned.

    >>> trained_model_dir("evaluate", argparse.Namespace(cores=1, model_dir="no/such/dir"))
    2
    """
    from spatial_tf.commands.shared import model_dir_problem

    problem = model_dir_problem(args.model_dir)
    if problem:
        return fail(prog, problem)
    if args.cores is None:
        args.cores = recorded_cores(args.model_dir) or 1
    return None


def budget(text: str) -> str:
    """A ``--budget``: a TPU generation or slice, a size or bytes, checked from the
    generation table and the size units, so that a bad one stops before TensorFlow loads
    (``spatial_tf.planning.parse_budget`` reads it afterwards).

    >>> budget("v3-8"), budget("16GiB")
    ('v3-8', '16GiB')
    """
    from spatial_tf.table import parse_size
    from spatial_tf.tpu_generations import generation, names

    try:
        size = parse_size(text)
    except ValueError as e:  # a number with a unit that is none
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; {e}, e.g. 16GiB") from None
    if size is None:
        try:
            generation(text)
            return text
        except ValueError:
            pass
    elif size > 0:
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not allowed; expected a TPU generation or slice ({names()}; e.g. v3 "
        f"or v3-8), a positive size such as 16GiB or 512MiB, or a number of bytes. Fix: "
        f"e.g. --budget v5e")


budget.__name__ = "budget"


def tpu_compiler_decides(budget_text) -> bool:
    """Whether ``--budget`` names a TPU generation or slice whose compiler (libtpu) is
    installed, so that the TPU compiler, not the tile-padding estimate, answers; asked of
    the installed packages without importing TensorFlow."""
    import importlib.metadata

    from spatial_tf.tpu_generations import generation

    if budget_text is None:
        return False
    try:
        importlib.metadata.version("libtpu")
        generation(budget_text)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return True


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
    """``--classes``, ``--depth``, ``--filters`` and ``--preset``: the 3D U-Net's options
    (train, plan; ``resolve_unet_preset`` fills the left-out ones); with ``training``,
    ``--dtype-policy`` too."""
    parser.add_argument("--classes", type=positive_int(2, 256), default=3, metavar="N",
                        help="classes, background included (default 3)")
    parser.add_argument("--depth", type=positive_int(1, 8), metavar="N",
                        help="unet3d: levels (default 3, or --preset's)")
    parser.add_argument("--filters", type=positive_int(1, 1024), metavar="N",
                        help="unet3d: level-1 filters (default 8, or --preset's)")
    parser.add_argument("--preset", choices=[p for p in UNET_PRESETS if p], metavar="NAME",
                        help="unet3d: model_garden (Model Garden's U-Net)")
    if training:
        parser.add_argument("--dtype-policy", choices=DTYPE_POLICIES, metavar="POLICY",
                            help="unet3d: float32, or mixed_bfloat16 (default on TPU)")


def add_modality_option(parser: argparse.ArgumentParser, training: bool = False) -> None:
    """``--modality``: how volume intensities are scaled (train records it; evaluate and
    predict take the recorded one and refuse another)."""
    text = ("unet3d: intensity scaling: ct (default), mr, other" if training else
            "unet3d: as trained (default; another is refused)")
    parser.add_argument("--modality", choices=MODALITIES, metavar="ct|mr|other", help=text)


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """``--device auto|tpu|cpu``: where the steps run (train, evaluate, predict)."""
    parser.add_argument("--device", choices=DEVICES, default="auto", metavar="auto|tpu|cpu",
                        help="auto (default): a TPU if found, else CPU emulator")


def add_nonfinite_option(parser: argparse.ArgumentParser) -> None:
    """``--nonfinite VALUE``: what NaN or infinite voxels of an input volume become
    (default: such a volume is refused, naming the file and the count)."""
    parser.add_argument("--nonfinite", type=float, metavar="VALUE",
                        help="unet3d: value for NaN/inf voxels (default: refuse)")


def resolve_unet_preset(args):
    """Fill ``--depth`` and ``--filters`` left out from ``--preset`` (or 3 and 8).

    >>> args = argparse.Namespace(preset="model_garden", depth=None, filters=16)
    >>> resolve_unet_preset(args); (args.depth, args.filters)
    (4, 16)
    """
    depth, filters = UNET_PRESETS[args.preset]
    args.depth = depth if args.depth is None else args.depth
    args.filters = filters if args.filters is None else args.filters


def resolve_cores(parser, args, default_spec, default_cores=DEFAULT_CORES):
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
