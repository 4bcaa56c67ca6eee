"""Command-line subcommands of ``python -m spatial_tf``.

Each module here defines ``add_parser(subparsers)`` (registers its arguments and sets
``func`` to its entry point) and ``run(args) -> int``. To add a command, add its module
name to ``COMMANDS``.
"""
COMMANDS = ("demo", "describe", "train", "evaluate", "predict", "plan", "cache")
