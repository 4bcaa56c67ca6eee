"""Command-line subcommands of ``python -m spatial_tf``.

Each module here defines ``add_parser(subparsers)`` (registers its arguments and sets
``func`` to its entry point) and ``run(args) -> int``. To add a command, add its module
name to ``COMMANDS``. ``Parser`` (the parser class of every command) and ``DOCS`` (the
page that explains the options) are imported on first use, so that this package stays
as cheap to import as its list of commands.
"""
import importlib

COMMANDS = ("demo", "describe", "train", "evaluate", "predict", "plan", "cache")

# public name -> module that defines it, imported on first use
_EXPORTS = {
    "DOCS": "spatial_tf.commands.options",
    "Parser": "spatial_tf.commands.options",
}
# no __all__: pdoc documents only the submodules an __all__ names, and each command's
# module has its page in the API reference


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:  # then `from spatial_tf.commands import volumes` imports the module
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
