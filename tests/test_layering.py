"""spatial_tf's imports run one way: applications -> core -> foundation, and never in a
cycle. The layers are drawn in docs/architecture.md; a new module is added to one here."""
import ast
import pathlib

import pytest

import spatial_tf

PACKAGE = pathlib.Path(spatial_tf.__file__).parent

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
             "spatial_tf.partition_friendly", "spatial_tf.resize", "spatial_tf.resize_layers",
             "spatial_tf.layers", "spatial_tf.per_frame", "spatial_tf.losses",
             "spatial_tf.metrics",
             "spatial_tf.planning", "spatial_tf.testing"],
    "applications": ["spatial_tf.data", "spatial_tf.models", "spatial_tf.detection",
                     "spatial_tf.train", "spatial_tf.viz", "spatial_tf.commands",
                     "spatial_tf.__main__"],
}


def module_name(path, root):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root, exports=None):
    """``{module: {imported spatial_tf module, ...}}`` for every module under ``root``:
    function-level imports included, ``from pkg import submodule`` as the submodule, and
    a lazily exported name (``from spatial_tf import Emulator``) as its defining module."""
    exports = exports or {}
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in files:
                        targets.add(full)
                    elif base == root.name:
                        targets.add(exports.get(alias.name, base))
                    else:
                        targets.add(base)
        graph[name] = {_owner(t, files) for t in targets if t.split(".")[0] == root.name} - {name}
    return graph


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


@pytest.fixture(scope="module")
def graph():
    return import_graph(PACKAGE, spatial_tf._EXPORTS)


def test_imports_run_from_applications_to_core_to_foundation(graph):
    assert len(graph) > 80  # every module of the package was read
    assert violations(graph, LAYERS) == []


def test_no_module_imports_itself_through_others(graph):
    assert cycles(graph) == []


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
