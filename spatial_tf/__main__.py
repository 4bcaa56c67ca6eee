"""``python -m spatial_tf <command>``: see ``python -m spatial_tf --help``."""
import argparse
import importlib
import os
import sys


def build_parser():
    from spatial_tf.commands import COMMANDS

    parser = argparse.ArgumentParser(
        prog="python -m spatial_tf",
        description="Spatial partitioning for TensorFlow 2: demo, describe, plan.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"spatial_tf.commands.{name}").add_parser(sub)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
