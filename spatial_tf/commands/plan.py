"""``python -m spatial_tf plan --shape 1,128,128,128,1 --cores 8 --budget v3``: which spec
fits the per-core memory budget with the least communication, and how fast it steps.

Compiles the model's train step for every candidate spec on the CPU emulator (or, with
libtpu and a TPU generation as ``--budget``, with XLA's TPU compiler) and ranks them;
``--max-size``, ``--fewest-cores`` and several ``--cores`` search further. Details:
docs/cli.md#plan and docs/guide-planning.md.
"""
import argparse
import math
import sys

from spatial_tf.commands.options import (add_command, add_unet_options, budget, positive_int,
                                         power_of_two, resolve_unet_preset)
from spatial_tf.table import plural

__all__ = ["add_parser", "run", "shape_list", "MODELS"]

MODELS = ("unet3d",)
EPILOG = """\
Exit status: 0 when a candidate fits --budget (and --max-size and
--fewest-cores found an answer), or with no --budget; 1 when no candidate fits
(or a search found no cube or core count that fits) or --timeout ended the
compiles first; 2 for a usage error; 130 after Ctrl-C (the rows compiled by
then are printed)."""
AUTO_FIT_VOXELS = 64**3  # above this, --fit-sizes defaults to DEFAULT_FIT_SIZES
DEFAULT_FIT_SIZES = (32, 48, 64)


def shape_list(text):
    """``"1,128,128,128,1"`` -> ``[1, 128, 128, 128, 1]`` (rank 3 to 6).

    >>> shape_list("1,64,64,64,1")
    [1, 64, 64, 64, 1]
    """
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = None
    if values is None or not 3 <= len(values) <= 6 or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(
            f"expected batch,spatial sizes...,channels as 3 to 6 comma-separated positive "
            f"ints such as 1,128,128,128,1; got {text!r}")
    return values


shape_list.__name__ = "shape"


def _edges(text):
    if text.lower() in ("none", "off"):
        return None
    if text.lower() == "auto":
        return "auto"
    values = shape_list(f"1,{text},1")[1:-1] if text.count(",") < 4 else None
    if not values or len(set(values)) < 2:
        raise argparse.ArgumentTypeError(
            f"expected 2 to 4 different comma-separated cube edges such as 32,48,64, or "
            f"'none'; got {text!r}")
    return values


_edges.__name__ = "edges"


def core_counts(text):
    """``"1,2,4"`` -> ``[1, 2, 4]``: each a power of two from 1 to 128.

    >>> core_counts("8"), core_counts("4,1,2")
    ([8], [1, 2, 4])
    """
    return sorted({power_of_two(v) for v in text.split(",")})


core_counts.__name__ = "cores"


def add_parser(subparsers):
    p = add_command(
        subparsers, "plan", help="which spec fits the per-core memory budget with the least "
                                 "communication",
        description="Compile the model's train step for every candidate spec and rank them:\n"
                    "fits --budget per core, then least halo and resharding bytes (or, by the\n"
                    "TPU compiler, fastest step). Sizes above 64^3 are fit from smaller ones.",
        usage="python -m spatial_tf plan --shape B,D,H,W,C [options]", epilog=EPILOG)
    p.add_argument("--model", choices=MODELS, default="unet3d", help="the model (default unet3d)")
    add_unet_options(p)
    p.add_argument("--shape", type=shape_list, required=True, metavar="B,D,H,W,C",
                   help="the input batch, e.g. 1,128,128,128,1")
    p.add_argument("--cores", type=core_counts, default=[8], metavar="N[,N...]",
                   help="cores per replica: 1, 2, 4, ..., 128 (default 8)")
    p.add_argument("--budget", type=budget, metavar="BUDGET",
                   help="per-core memory: v3, v5e-8, 16GiB, bytes, ...")
    p.add_argument("--memory", choices=("tpu", "cpu"), default="tpu",
                   help="the peak --budget checks (default tpu)")
    p.add_argument("--bf16", action="store_true",
                   help="count activations as bfloat16 in the TPU estimate")
    p.add_argument("--fit-sizes", type=_edges, default="auto", metavar="E1,E2",
                   help="cube edges to fit on, or none (default: auto)")
    p.add_argument("--max-size", action="store_true",
                   help="also the largest cube that fits --budget")
    p.add_argument("--fewest-cores", action="store_true",
                   help="also the fewest cores that fit (TPU compiler)")
    p.add_argument("--price", type=float, metavar="PER_CHIP_HOUR",
                   help="with several --cores: cost per 1,000 examples")
    p.add_argument("--plot", metavar="PNG", help="write memory and communication per candidate")
    p.add_argument("--workers", type=positive_int(1, 64), default=1, metavar="N",
                   help="compiles at once (default 1)")
    p.add_argument("--timeout", type=positive_int(1, 10**6), metavar="SECONDS",
                   help="stop compiling then and rank what compiled")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar, no row per compile as it ends")
    p.set_defaults(func=run, check=lambda args: check_args(p, args))
    return p


def check_args(parser, args):
    """Checks that need several options (argparse-style one line, exit 2); ``--plot``
    must be a file that can be written. Imports no TensorFlow: a usage error is said at
    once."""
    from spatial_tf.commands.outputs import check_file

    resolve_unet_preset(args)
    if args.plot is not None:
        try:
            check_file("--plot", args.plot, example="plan.png")
        except ValueError as e:
            parser.error(str(e))
    compiler = _tpu_compiler_decides(args)
    _check_scaling(parser, args, compiler)
    if args.fewest_cores and not compiler:
        parser.error("argument --fewest-cores: needs XLA's TPU compiler (pip install "
                     "'spatial-tf[tpu-compile]') and a TPU generation as --budget; expected "
                     "e.g. --budget v3")
    if args.fit_sizes == "auto" and compiler:
        args.fit_sizes = None  # the TPU compiler compiles at the real size
    if args.fit_sizes == "auto":
        big = math.prod(args.shape[1:-1]) > AUTO_FIT_VOXELS
        args.fit_sizes = list(DEFAULT_FIT_SIZES) if big or args.max_size else None
    if args.max_size and args.budget is None:
        parser.error("argument --max-size: needs --budget; expected e.g. --budget v3")
    if args.max_size and args.fit_sizes is None and not compiler:
        parser.error("argument --max-size: needs --fit-sizes; expected e.g. --fit-sizes 32,48,64")
    pool = 2 ** (args.depth - 1)
    for edge in args.fit_sizes or ():
        if edge % pool:
            parser.error(f"argument --fit-sizes: {edge} is not allowed with --depth "
                         f"{args.depth}; expected multiples of {pool} (the U-Net halves the "
                         f"volume {args.depth - 1} times)")
    for axis, size in enumerate(args.shape[1:-1]):
        if size % pool:
            parser.error(f"argument --shape: spatial size {size} (axis {axis + 1}) is not "
                         f"allowed with --depth {args.depth}; expected a multiple of {pool}")


def _check_scaling(parser, args, compiler):
    """Several core counts (or a price): each count's fastest fitting spec, which needs
    the TPU compiler's step times; the searches answer one count only."""
    if args.price is not None and not args.price > 0:
        parser.error(f"argument --price: {args.price:g} is not allowed; expected a positive "
                     f"price per chip-hour, e.g. --price 1.2")
    if len(args.cores) == 1 and args.price is None:
        return
    if not compiler:
        parser.error("argument --cores: several core counts (or --price) need XLA's TPU "
                     "compiler's step times (pip install 'spatial-tf[tpu-compile]') and a "
                     "TPU generation as --budget; expected e.g. --budget v5e")
    for flag in ("max_size", "fewest_cores"):
        if getattr(args, flag):
            parser.error(f"argument --{flag.replace('_', '-')}: answers one core count; "
                         f"expected one --cores value with it")


def _tpu_compiler_decides(args):
    """Whether the TPU compiler measures the plan: a TPU generation as ``--budget``, its
    compiler installed, and the TPU memory basis."""
    from spatial_tf.commands.options import tpu_compiler_decides

    return args.memory == "tpu" and tpu_compiler_decides(args.budget)


def run(args):
    from spatial_tf import logs
    from spatial_tf.commands.options import fail

    prog = "python -m spatial_tf plan"
    logs.start_tensorflow()
    with logs.quiet():
        import keras  # noqa: F401

    from spatial_tf import planning
    from spatial_tf.models import unet3d

    try:
        budget = planning.parse_budget(args.budget) if args.budget is not None else None
    except (TypeError, ValueError) as e:
        return fail(prog, f"argument --budget: {e}")

    def model_fn(input_shape):
        return unet3d(input_shape, num_classes=args.classes, depth=args.depth,
                      base_filters=args.filters, preset=args.preset)

    shape = tuple(args.shape)
    model = model_fn(shape[1:]) if args.fit_sizes is None else model_fn(
        (args.fit_sizes[0],) * (len(shape) - 2) + shape[-1:])
    options = planning.PlanOptions(memory=args.memory, bf16=args.bf16,
                                   fit_sizes=args.fit_sizes, workers=args.workers,
                                   progress=not args.no_progress, timeout=args.timeout)
    training = planning.Training(model_fn=model_fn)
    if len(args.cores) > 1 or args.price is not None:
        return _scaling(args, prog, planning, model, shape, budget, options, training)
    try:
        result = planning.plan(model, shape, args.cores[0], budget, options=options,
                               training=training)
    except TimeoutError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        return fail(prog, str(e))
    print(_model_line(args))
    print(result)
    if result.unfinished:  # Ctrl-C (130, as a shell reports SIGINT) or --timeout (1)
        from spatial_tf.planning import INTERRUPTED

        return 130 if result.unfinished[0].reason.endswith(INTERRUPTED) else 1
    answered = _searches(args, planning, model, shape, budget, result,
                         planning.Training(model_fn=model_fn))
    if args.plot:
        from spatial_tf.commands.outputs import write_atomically
        from spatial_tf.planning import plot

        write_atomically(args.plot, lambda tmp: plot(result, tmp))
        print(f"\nplot written to {args.plot}")
    return 0 if result.recommended is not None and answered else 1  # 1: nothing fits


def _model_line(args):
    preset = f" ({args.preset} preset)" if args.preset else ""
    return (f"{args.model}{preset}: depth {args.depth}, {args.filters}-"
            f"{args.filters * 2 ** (args.depth - 1)} filters, batch norm, {args.classes} "
            f"classes, Adam train step")


def _scaling(args, prog, planning, model, shape, budget, options, training):
    """Each of ``--cores``' fastest fitting spec and step time; exit 1 if none fits."""
    from spatial_tf.commands.options import fail

    try:
        found = planning.scaling(model, shape, args.cores, budget,
                                 price_per_chip_hour=args.price, options=options,
                                 training=training)
    except ValueError as e:
        return fail(prog, str(e))
    print(_model_line(args))
    print(found)
    if args.plot:
        from spatial_tf.commands.outputs import write_atomically

        write_atomically(args.plot, lambda tmp: planning.plot_scaling(found, tmp))
        print(f"\nplot written to {args.plot}")
    return 0 if any(r.best is not None for r in found.rows) else 1


def _searches(args, planning, model, shape, budget, result, training):
    """Print what ``--max-size`` and ``--fewest-cores`` found; whether each found an
    answer (a cube or a core count that fits)."""
    answered = True
    if args.max_size and result.tpu_source:
        multiple = 2 ** (args.depth - 1)   # the U-Net's pooling needs edges of its multiples
        edges = range(multiple, 16 * max(shape[1:-1]) + 1, multiple)
        found = planning.search_largest_edge(model, shape, args.cores[0], budget.name,
                                             edges=edges, training=training)
        print(f"\n{found}")
        answered = found.answer is not None
    elif args.max_size:
        edge, best = result.largest_edge(multiple=2 ** (args.depth - 1))
        if best is None:
            print(f"\nlargest cube within {budget} on {plural(args.cores[0], 'core')}: none "
                  f"(the fixed part alone does not fit)")
        else:
            print(f"\nlargest cube within {budget} on {plural(args.cores[0], 'core')}: "
                  f"{edge}^3 with {'[' + ','.join(map(str, best.spec)) + ']'} (predicted)")
        answered = best is not None
    if args.fewest_cores:
        found = planning.search_fewest_cores(model, shape, budget.name, training=training)
        print(f"\n{found}")
        answered = answered and found.answer is not None
    return answered
