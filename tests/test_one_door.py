"""Private attributes and jax are reached through one door each, read from every module's
syntax tree: TensorFlow's, Keras' and tf_keras' private attributes only in
``spatial_tf/_tf_internals.py``, jax (and its private modules) only in the emulator's
``xla/_xla.py`` and its TPU compiler worker ``tpu/_xla_tpu.py``; a module reaches
another module's objects through their methods, never their ``_attributes``."""
import ast
import pathlib
import textwrap

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "spatial_tf"
TF_DOOR = "_tf_internals.py"
JAX_DOOR = ("emulator/xla/_xla.py", "emulator/tpu/_xla_tpu.py")
JAX_MODULES = ("jax", "jaxlib", "libtpu")
# private by name only: Python documents them as public API
PUBLIC_BY_DOCUMENTATION = {
    "_fields", "_replace", "_asdict", "_make",  # collections.namedtuple
    "_exit",  # os._exit
}


def _own_private_names(cls: ast.ClassDef) -> set:
    """The private names a class defines: its methods and what it assigns to ``self._x``."""
    names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name)}
    for node in ast.walk(cls):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "self" and isinstance(node.ctx, ast.Store)):
            names.add(node.attr)
    return {n for n in names if n.startswith("_")}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(source: str) -> list:
    """``(line, expression)`` of every private attribute read off an object that is not
    the reader's own (``self``, ``cls``, ``super()``, or an instance of the same class)."""
    tree = ast.parse(source)
    found = []

    def visit(node, own):
        if isinstance(node, ast.ClassDef):
            own = own | _own_private_names(node)
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            base = node.value
            mine = (isinstance(base, ast.Name) and base.id in ("self", "cls")) or (
                isinstance(base, ast.Call) and isinstance(base.func, ast.Name)
                and base.func.id == "super")
            if not (mine or node.attr in own or node.attr in PUBLIC_BY_DOCUMENTATION):
                found.append((node.lineno, ast.unparse(node)))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and _is_private(node.args[1].value)
                and node.args[1].value not in own | PUBLIC_BY_DOCUMENTATION):
            found.append((node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, own)

    visit(tree, set())
    return found


def jax_imports(source: str) -> list:
    """``(line, module)`` of every import of jax, jaxlib or libtpu (``importlib``'s
    included)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom)
                 else [node.args[0].value] if _is_import_module_call(node) else [])
        found += [(node.lineno, n) for n in names if n.split(".")[0] in JAX_MODULES]
    return found


def _is_import_module_call(node) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and bool(node.args) and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str))


def _modules():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100, modules  # the whole package, not an empty glob
    return modules


def _relative(path):
    return path.relative_to(PACKAGE).as_posix()


def test_private_attributes_are_reached_only_through_the_doors():
    offenders = [f"spatial_tf/{_relative(p)}:{line}: {expression}"
                 for p in _modules() if _relative(p) not in (TF_DOOR, *JAX_DOOR)
                 for line, expression in private_reaches(p.read_text())]
    assert offenders == [], (
        "private attributes reached outside the doors; reach TensorFlow's and Keras' "
        "through spatial_tf/_tf_internals.py, jax's through emulator/xla/_xla.py, "
        "and other spatial_tf objects' through a method:\n" + "\n".join(offenders))


def test_jax_is_imported_only_by_the_jax_door():
    offenders = [f"spatial_tf/{_relative(p)}:{line}: import {module}"
                 for p in _modules() if _relative(p) not in JAX_DOOR
                 for line, module in jax_imports(p.read_text())]
    assert offenders == [], "\n".join(offenders)
    # the door itself does import it (the test reads the right files)
    assert jax_imports((PACKAGE / JAX_DOOR[0]).read_text())


@pytest.mark.parametrize("source, expected", [
    ("layer._flatten_layers()", [(1, "layer._flatten_layers")]),
    ("x = getattr(handle, '_handle_data', None)", [(1, "getattr(handle, '_handle_data', None)")]),
    ("emulator._warned.add(key)", [(1, "emulator._warned")]),
    ("tf.keras.layers.Layer._obj_reference_counts", [(1, "tf.keras.layers.Layer._obj_reference_counts")]),
    ("self._cache = {}\nsuper()._init()\ncls._x", []),
    ("point._replace(x=1)\npoint._fields\nos._exit(0)", []),
    ("x.__class__", []),
    # a class's own private state, read off another instance of it
    ("""
     class Key:
         def __init__(self):
             self._ids = ()
         def __eq__(self, other):
             return self._ids == other._ids
     """, []),
    # ...but not another class's
    ("""
     class Key:
         def __eq__(self, other):
             return other._ids
     """, [(4, "other._ids")]),
])
def test_private_reaches_are_found(source, expected):
    assert private_reaches(textwrap.dedent(source)) == expected


@pytest.mark.parametrize("source, expected", [
    ("import jax", [(1, "jax")]),
    ("import jax.numpy as jnp", [(1, "jax.numpy")]),
    ("from jaxlib import xla_client", [(1, "jaxlib")]),
    ("from jax._src.lib import xla_client", [(1, "jax._src.lib")]),
    ("import libtpu", [(1, "libtpu")]),
    ("importlib.import_module('jax._src.xla_bridge')", [(1, "jax._src.xla_bridge")]),
    ("from importlib import import_module\nimport_module('jaxlib')", [(2, "jaxlib")]),
    ("import jaxtyping\nimport numpy\nimportlib.import_module('numpy')", []),
])
def test_jax_imports_are_found(source, expected):
    assert jax_imports(source) == expected
