"""``python -m spatial_tf <command>``: see ``python -m spatial_tf --help``.

XLA and TensorFlow log lines are hidden unless ``SPATIAL_TF_VERBOSE=1`` is set.
"""
import importlib
import importlib.util
import os
import sys


def _unshadow():
    """Make ``spatial_tf`` this package when a folder named ``spatial_tf`` in the current
    directory (a clone of the repository, say) was imported as a namespace package in its
    place: Python puts the current directory first on ``sys.path`` under ``-m``."""
    package = sys.modules.get("spatial_tf")
    if package is None or getattr(package, "__file__", None) is not None:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in [n for n in sys.modules if n == "spatial_tf" or n.startswith("spatial_tf.")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        "spatial_tf", os.path.join(here, "__init__.py"), submodule_search_locations=[here])
    module = importlib.util.module_from_spec(spec)
    sys.modules["spatial_tf"] = module
    spec.loader.exec_module(module)



def build_parser():
    from spatial_tf.commands import COMMANDS, DOCS, Parser

    parser = Parser(
        prog="python -m spatial_tf",
        description=(
            "Spatial partitioning for TensorFlow 2. Commands: " + ", ".join(COMMANDS) + ". "
            "Set SPATIAL_TF_VERBOSE=1 to see TensorFlow's and XLA's own log lines."
        ),
        epilog=f"python -m spatial_tf COMMAND --help shows a command's options; {DOCS} in "
               f"the spatial_tf repository explains them all.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"spatial_tf.commands.{name}").add_parser(sub)
    return parser


def main(argv=None):
    from spatial_tf import logs

    if not logs.verbose():
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if getattr(args, "check", None):  # checks that need several options, before TensorFlow
        status = args.check(args)  # exits 2 like argparse, or returns 2 having said why
        if status:
            return status
    try:
        return args.func(args)
    except KeyboardInterrupt:  # one line, no traceback, the shell's status for SIGINT
        print(f"python -m spatial_tf {args.command}: stopped by Ctrl-C.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    _unshadow()
    sys.exit(main())
