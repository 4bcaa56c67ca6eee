"""spatial_tf's imports run one way: applications -> core -> foundation, and never in a
cycle; inside a package with sub-layers (the emulator's parts) its modules import one way
too; and a package is imported by the others through its face, its ``__init__``, never
from one of its plain modules. The layers are drawn in docs/architecture.md, and so is
the package's tree, which this test keeps in step with the folders; a new module is added
to a layer here."""
import ast
import pathlib
import re

import pytest

import spatial_tf

PACKAGE = pathlib.Path(spatial_tf.__file__).parent
ROOT = PACKAGE.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# lowest first; a module may import its own layer and the ones before it
LAYERS = {
    "foundation": ["spatial_tf", "spatial_tf._tf_internals", "spatial_tf.checks",
                   "spatial_tf.logs", "spatial_tf.table", "spatial_tf.context",
                   "spatial_tf.tpu_generations", "spatial_tf.frames",
                   "spatial_tf.layer_kinds"],
    "core": ["spatial_tf.spec", "spatial_tf.topology", "spatial_tf.annotate",
             "spatial_tf.summarize", "spatial_tf.label_inputs", "spatial_tf.steps",
             "spatial_tf.devices", "spatial_tf.strategy",
             "spatial_tf.emulator", "spatial_tf.update_order", "spatial_tf.halo_conv",
             "spatial_tf.space_to_depth",
             "spatial_tf.partition_friendly", "spatial_tf.resize", "spatial_tf.resize_layers",
             "spatial_tf.layers", "spatial_tf.per_frame", "spatial_tf.losses",
             "spatial_tf.metrics",
             "spatial_tf.planning", "spatial_tf.testing"],
    "applications": ["spatial_tf.data", "spatial_tf.models", "spatial_tf.detection",
                     "spatial_tf.train", "spatial_tf.viz", "spatial_tf.commands",
                     "spatial_tf.__main__"],
}

# the parts of a package that form layers of their own, lowest first; a module of the
# package may import its own part and the ones before it (the package's __init__, which
# each part's __init__ imports for its lazy loading, is in none of them)
SUB_LAYERS = {
    "spatial_tf.emulator": {
        # the door to jax and XLA: compile, run, cache, errors, handles, HLO text
        "xla": ["spatial_tf.emulator.xla"],
        # XLA:TPU, compile-only: targets, the worker, TpuCompiledStep, step time
        "tpu": ["spatial_tf.emulator.tpu"],
        # tf.summary calls cut out of a step
        "summaries": ["spatial_tf.emulator.summaries"],
        # trace, lower and compile for a target
        "compile": ["spatial_tf.emulator.compile"],
        # report, compare, remedies
        "diagnose": ["spatial_tf.emulator.diagnose"],
        # the tf.distribute strategy, running for every replica
        "distribute": ["spatial_tf.emulator.distribute"],
    },
}


def module_name(path, root):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root, exports=None):
    """``{module: {imported spatial_tf module, ...}}`` for every module under ``root``:
    function-level imports included, ``from pkg import submodule`` as the submodule, and
    a lazily exported name (``from spatial_tf import Emulator``, ``from
    spatial_tf.emulator.tpu import tpu_target``: a package's ``_EXPORTS`` table, or
    ``exports`` for ``root``'s) as its defining module."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    tables = lazy_exports(files)
    tables.setdefault(root.name, {}).update(exports or {})
    graph = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _base(node, name, path)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in files:
                        targets.add(full)
                    else:
                        targets.add(tables.get(base, {}).get(alias.name, base))
        graph[name] = {_owner(t, files) for t in targets if t.split(".")[0] == root.name} - {name}
    return graph


def _base(node, name, path):
    """The absolute module an ``ImportFrom`` in module ``name`` (file ``path``) names."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    up = package.split(".")[:len(package.split(".")) - node.level + 1]
    return ".".join(up + ([node.module] if node.module else []))


def lazy_exports(files):
    """``{package: {name: defining module}}``: the ``_EXPORTS`` table of each package whose
    ``__init__`` imports its names on first use."""
    tables = {}
    for name, path in files.items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
                tables[name] = ast.literal_eval(node.value)
    return tables


def _owner(target, files):
    while target not in files and "." in target:
        target = target.rpartition(".")[0]
    return target


def layer_of(module, layers):
    best = None
    for layer, prefixes in layers.items():
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[1]):
                    best = (layer, prefix)
    return best[0] if best else None


def violations(graph, layers):
    """Imports against the direction, and modules in no layer."""
    rank = {layer: i for i, layer in enumerate(layers)}
    found = []
    for module, targets in sorted(graph.items()):
        own = layer_of(module, layers)
        if own is None:
            found.append(f"{module} is in no layer: add it to LAYERS")
            continue
        for target in sorted(targets):
            theirs = layer_of(target, layers)
            if theirs is not None and rank[theirs] > rank[own]:
                found.append(f"{module} ({own}) imports {target} ({theirs})")
    return found


def inside(graph, package):
    """The imports among ``package``'s modules, the package's own module left out."""
    prefix = package + "."
    return {module: {t for t in targets if t.startswith(prefix)}
            for module, targets in graph.items() if module.startswith(prefix)}


def cycles(graph):
    """Every group of modules that import each other, directly or not (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def faces_broken(root):
    """``file:line: the import, what is wrong. Fix: ...`` for each import (function-level
    ones included) that passes another package's face: one of another top-level
    subpackage's plain modules (``from spatial_tf.data.readers import x``, ``import
    spatial_tf.data.readers``, or ``from spatial_tf.data import readers`` when the package
    neither names it nor has a ``__getattr__`` that hands out its modules on first use),
    or a ``_`` name of another package. Imports inside one top-level package are free, and
    so are the foundation's plain modules (``spatial_tf.table``)."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    packages = {n for n, p in files.items() if p.name == "__init__.py"}

    def top(module):  # spatial_tf.data for spatial_tf.data.readers
        return ".".join(module.split(".")[:2])

    found = []
    for name, path in sorted(files.items()):
        where = path.relative_to(root.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imports = [(a.name, [a.name.rpartition(".")[2]]) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                imports = [(_base(node, name, path), [a.name for a in node.names])]
            else:
                continue
            for base, names in imports:
                if base not in files or top(base) == top(name) or top(base) not in packages \
                        or top(base) == root.name:
                    continue
                package, wrong = base, []
                if base not in packages:
                    package = base.rpartition(".")[0]
                    wrong.append(f"reaches into {package}'s module {base.rpartition('.')[2]}")
                elif isinstance(node, ast.ImportFrom):
                    face = _face(files[base])
                    wrong += [f"reaches into {base}'s module {n}" for n in names
                              if f"{base}.{n}" in files and f"{base}.{n}" not in packages
                              and n not in face and "__getattr__" not in face]
                private = [n for n in names if n.startswith("_")]
                if private:
                    wrong.append(f"takes {', '.join(private)}, private to {package}")
                if wrong:
                    rename = "give it a public name and " if private else ""
                    found.append((where, node.lineno, f"{ast.unparse(node)} {' and '.join(wrong)}. "
                                  f"Fix: {rename}import it from {package}, which exports it; add "
                                  f"it to that package's __init__ if it does not."))
    return [f"{where}:{line}: {text}" for where, line, text in sorted(found)]


def _face(init):
    """What a package's ``__init__`` shows the others: the names it binds at its top level
    (imports, definitions, assignments) or lists in ``__all__`` or its ``_EXPORTS`` table;
    with a ``__getattr__`` among them, its modules too, imported on first use."""
    names = set()
    for node in ast.parse(init.read_text(), str(init)).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update([target.id] if isinstance(target, ast.Name) else [])
                if isinstance(target, ast.Name) and target.id in ("__all__", "_EXPORTS"):
                    try:
                        names.update(ast.literal_eval(node.value))
                    except ValueError:  # __all__ = sorted(_EXPORTS): the table has them
                        pass
    return names


@pytest.fixture(scope="module")
def graph():
    return import_graph(PACKAGE, spatial_tf._EXPORTS)


def test_imports_run_from_applications_to_core_to_foundation(graph):
    assert len(graph) > 80  # every module of the package was read
    assert violations(graph, LAYERS) == []


def test_no_module_imports_itself_through_others(graph):
    assert cycles(graph) == []


@pytest.mark.parametrize("package", sorted(SUB_LAYERS))
def test_the_parts_of_a_package_import_one_way(graph, package):
    parts = inside(graph, package)
    assert len(parts) > 20  # the package's modules were read
    assert violations(parts, SUB_LAYERS[package]) == []
    folders = {m[len(package) + 1:].split(".")[0] for m in parts
               if (PACKAGE.parent / m.replace(".", "/")).is_dir()}
    assert folders == set(SUB_LAYERS[package]), "a part of its own is one layer here"


def test_other_packages_are_imported_through_their_faces():
    assert faces_broken(PACKAGE) == []


def drawn_tree(text):
    """``{path: words}`` of the tree drawn in the first block under ``## Package layout``:
    a folder (``emulator/``) or a module (``strategy.py``) first on its line, two spaces
    deeper per level, and the words after it down to the next one."""
    block = text.split("\n## Package layout", 1)[1].split("```", 2)[1]
    entries, folders, last = {}, [], None
    for line in block.splitlines():
        depth, rest = divmod(len(line) - len(line.lstrip(" ")), 2)
        entry = re.match(r"([\w.]+/|[\w.]+\.py)(?:\s|$)", line.lstrip(" "))
        if entry and not rest and depth <= len(folders):
            name = entry.group(1)
            del folders[depth:]
            last = "/".join(folders + [name.rstrip("/")]) + ("/" if name.endswith("/") else "")
            entries[last] = ""
            if name.endswith("/"):
                folders.append(name.rstrip("/"))
            line = line.lstrip(" ")[len(name):]
        if last is not None:
            entries[last] += " " + line.strip()
    return entries


def tree_mismatches(entries, root):
    """What the drawn tree says of ``root``'s package that its folders do not: a folder
    or module that is not there, a subpackage not drawn, a module named in an entry's
    words that is not in that entry's folder."""
    found = []
    package = root.name + "/"
    drawn = {p for p in entries if p.startswith(package)}
    for path in sorted(drawn):
        where = root.parent / path
        if not (where / "__init__.py" if path.endswith("/") else where).is_file():
            found.append(f"{path} is drawn but is not in the package")
        folder = path if path.endswith("/") else path.rpartition("/")[0] + "/"
        for named in re.findall(r"(?<![\w/.])(\w+\.py)\b", entries[path]):
            if not (root.parent / folder / named).is_file():
                found.append(f"{path} names {named}, which is not in {folder}")
    for init in sorted(root.rglob("__init__.py")):
        path = init.parent.relative_to(root.parent).as_posix() + "/"
        if path != package and path not in drawn:
            found.append(f"{path} is not drawn")
    return found


def test_the_package_layout_drawn_in_architecture_md_is_the_tree():
    entries = drawn_tree(ARCHITECTURE.read_text())
    assert {"spatial_tf/emulator/xla/", "spatial_tf/strategy.py", "tests/"} <= set(entries)
    assert tree_mismatches(entries, PACKAGE) == []


def test_the_emulators_parts_are_drawn_in_their_order_and_its_tests_mirror_them():
    text = ARCHITECTURE.read_text().split("\n## The emulator's parts", 1)[1]
    block = text.split("```", 2)[1]
    drawn = re.findall(r"^ (\w+)\s{2,}", block, re.M)
    assert drawn[::-1] == list(SUB_LAYERS["spatial_tf.emulator"])
    tests = {d.name for d in (ROOT / "tests" / "emulator").iterdir()
             if d.is_dir() and any(d.glob("test_*.py"))}
    assert tests <= set(SUB_LAYERS["spatial_tf.emulator"]), "tests mirror the package"


def test_the_tree_check_catches_a_missing_folder_a_stale_entry_and_a_misplaced_module(
        tmp_path):
    root = _tree(tmp_path, {"__init__.py": "", "emulator/__init__.py": "",
                            "emulator/xla/__init__.py": "", "emulator/xla/_xla.py": "",
                            "emulator/tpu/__init__.py": "", "checks.py": ""})
    text = ("# A\n\n## Package layout\n\n```\nspatial_tf/\n  checks.py  checks\n"
            "  emulator/      Emulator; _xla.py is the only module\n"
            "                 that imports jax (see tests/test_one_door.py)\n"
            "    compile/     trace\n    xla/  the door\n  table.py\ntests/ mirrors\n```\n")
    entries = drawn_tree(text)
    assert list(entries) == ["spatial_tf/", "spatial_tf/checks.py", "spatial_tf/emulator/",
                             "spatial_tf/emulator/compile/", "spatial_tf/emulator/xla/",
                             "spatial_tf/table.py", "tests/"]
    assert "that imports jax" in entries["spatial_tf/emulator/"]
    assert tree_mismatches(entries, root) == [
        "spatial_tf/emulator/ names _xla.py, which is not in spatial_tf/emulator/",
        "spatial_tf/emulator/compile/ is drawn but is not in the package",
        "spatial_tf/table.py is drawn but is not in the package",
        "spatial_tf/emulator/tpu/ is not drawn",
    ]


def _tree(tmp_path, files):
    root = tmp_path / "spatial_tf"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_catch_a_wrong_direction_a_cycle_and_an_unlisted_module(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "spec/__init__.py": "def f():\n    from spatial_tf.models import unet  # wrong way\n",
        "models/__init__.py": "from spatial_tf.models.unet import unet\n",
        "models/unet.py": "from . import blocks\nfrom spatial_tf import spec\n",
        "models/blocks.py": "import spatial_tf.models.unet\n",
        "extra.py": "from spatial_tf import Exported\n",
        "exported.py": "",
    })
    layers = {"core": ["spatial_tf", "spatial_tf.spec", "spatial_tf.exported"],
              "applications": ["spatial_tf.models"]}
    graph = import_graph(root, {"Exported": "spatial_tf.exported"})
    assert graph["spatial_tf.models.unet"] == {"spatial_tf.models.blocks", "spatial_tf.spec"}
    assert graph["spatial_tf.extra"] == {"spatial_tf.exported"}
    assert violations(graph, layers) == [
        "spatial_tf.spec (core) imports spatial_tf.models.unet (applications)",
    ]
    # unet -> blocks -> unet, and spec -> unet -> spec through the wrong-way import
    assert cycles(graph) == [["spatial_tf.models.blocks", "spatial_tf.models.unet",
                              "spatial_tf.spec"]]
    layers["core"].remove("spatial_tf")
    assert "spatial_tf.extra is in no layer: add it to LAYERS" in violations(graph, layers)


def test_the_checks_catch_an_upward_import_between_the_parts_of_a_package(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "emulator/__init__.py": "def submodule(package, name): pass\n",
        "emulator/xla/__init__.py": "from spatial_tf.emulator import submodule\n",
        "emulator/xla/errors.py": "",
        "emulator/xla/executable.py": (
            "from spatial_tf.emulator.xla import errors\n"
            "def report():\n"
            "    from spatial_tf.emulator.diagnose.report import build  # wrong way\n"),
        "emulator/diagnose/__init__.py": "",
        "emulator/diagnose/report.py": "from spatial_tf.emulator.xla.executable import run\n",
        "emulator/extra/__init__.py": "",
        "emulator/extra/tool.py": "from spatial_tf.emulator.xla import errors\n",
    })
    layers = {"xla": ["spatial_tf.emulator.xla"], "diagnose": ["spatial_tf.emulator.diagnose"]}
    parts = inside(import_graph(root), "spatial_tf.emulator")
    assert "spatial_tf.emulator" not in parts
    assert parts["spatial_tf.emulator.xla"] == set()  # its loader is the package's
    assert violations(parts, layers) == [
        "spatial_tf.emulator.extra is in no layer: add it to LAYERS",
        "spatial_tf.emulator.extra.tool is in no layer: add it to LAYERS",
        "spatial_tf.emulator.xla.executable (xla) imports spatial_tf.emulator.diagnose.report "
        "(diagnose)",
    ]
    # the whole package's layers do not see it: every part is in the one core layer
    assert violations(import_graph(root), {"core": ["spatial_tf"]}) == []


def test_the_face_check_catches_a_plain_module_and_a_private_name_of_another_package(
        tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "table.py": "def plural(): pass\n",
        "data/__init__.py": "from spatial_tf.data.readers import read\n__all__ = ['read']\n",
        "data/readers.py": "def read(): pass\ndef _kind(): pass\n",
        "data/checking.py": "from spatial_tf.data.readers import _kind, read  # its own\n",
        "emulator/__init__.py": "",
        "emulator/xla/__init__.py": "def __getattr__(name): pass  # hands out its modules\n",
        "emulator/xla/cache.py": "",
        "commands/__init__.py": "",
        "commands/sizing.py": (
            "from spatial_tf.data import read\n"
            "from spatial_tf.table import plural\n"
            "from spatial_tf.emulator.xla import cache\n"
            "def size():\n"
            "    from spatial_tf.data.readers import read\n"
            "from spatial_tf.data import _kind\n"
            "from spatial_tf.data import readers\n"
            "import spatial_tf.data.readers\n"
            "import spatial_tf.data, spatial_tf.emulator.xla\n"),
        "strategy.py": "from spatial_tf.data.readers import _kind as kind\n",
    })
    fix = ("import it from spatial_tf.data, which exports it; add it to that package's "
           "__init__ if it does not.")
    assert faces_broken(root) == [
        "spatial_tf/commands/sizing.py:5: from spatial_tf.data.readers import read reaches "
        f"into spatial_tf.data's module readers. Fix: {fix}",
        "spatial_tf/commands/sizing.py:6: from spatial_tf.data import _kind takes _kind, "
        f"private to spatial_tf.data. Fix: give it a public name and {fix}",
        "spatial_tf/commands/sizing.py:7: from spatial_tf.data import readers reaches into "
        f"spatial_tf.data's module readers. Fix: {fix}",
        "spatial_tf/commands/sizing.py:8: import spatial_tf.data.readers reaches into "
        f"spatial_tf.data's module readers. Fix: {fix}",
        "spatial_tf/strategy.py:1: from spatial_tf.data.readers import _kind as kind reaches "
        "into spatial_tf.data's module readers and takes _kind, private to spatial_tf.data. "
        f"Fix: give it a public name and {fix}",
    ]
