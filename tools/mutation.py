"""Mutation check for the core modules: do the tests notice when the code is wrong?

    python tools/mutation.py                    # all core modules, 2 jobs
    python tools/mutation.py --files spatial_tf/spec/leaves.py --jobs 1
    python tools/mutation.py --list             # the mutants only, nothing run

Each mutant changes one point of one module: a comparison (``<`` to ``<=``, ``==`` to
``!=``, ``in`` to ``not in``, ...), ``and``/``or``, ``not x`` to ``x``, an integer
constant by +1 and -1, ``True``/``False``, ``+``/``-``, ``*``/``//``, ``%`` to ``//``,
``any``/``all``, ``min``/``max``, a ``raise`` deleted, ``return x`` to ``return None``,
``continue`` to ``break``. A mutant is *killed* when the module's tests (the ``tests/``
folder mirroring the module's package, plus the module's doctests) fail or time out, and
*survives* when they all pass. Score = killed / (mutants - equivalent), where the
equivalent mutants (no input can tell them from the original) are listed in
``EQUIVALENT`` below, each with the reason.

How it runs: TensorFlow and ``spatial_tf`` are imported once, in this process. For each
mutant a child is forked; it executes the mutated source in the module's own namespace,
rebinds the names other ``spatial_tf`` modules imported from it (``from m import f``), and
runs pytest in-process on the tests (``-x``: the first failure kills the mutant). A fork
costs milliseconds where a fresh interpreter costs seconds importing TensorFlow, which is
why this small runner is used rather than mutmut or cosmic-ray: both start a new test
process (or rewrite files on disk) per mutant, which on a 2-core machine makes a full run
take hours instead of minutes, and mutmut rewrites the source tree in place.
"""
import argparse
import ast
import collections
import copy
import dataclasses
import importlib
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_FILES = [
    "spatial_tf/spec/leaves.py",
    "spatial_tf/spec/paths.py",
    "spatial_tf/spec/validation.py",
    "spatial_tf/topology/shapes.py",
    "spatial_tf/topology/assignment.py",
    "spatial_tf/topology/slices.py",
    "spatial_tf/topology/hosts.py",
    "spatial_tf/topology/placement.py",
]

# Mutants no test can kill because the mutated program behaves the same for every input.
# Key: (file, the mutated line's source with surrounding spaces removed, mutation, column
# of the mutated expression in that stripped line, from 1: a line can hold the same
# mutation twice, as ``range(1, n + 1)`` holds two ``1 -> 2``).
EQUIVALENT = {
    ("spatial_tf/spec/leaves.py",
     "if len(dims) == 1 and isinstance(dims[0], (list, tuple, np.ndarray)):", "0 -> -1", 39):
        "dims has exactly one element here, so dims[0] and dims[-1] are the same object",
    ("spatial_tf/spec/leaves.py",
     "dims = tuple(dims[0])  # Tile([1, 4, 1, 1]) reads the same as Tile(1, 4, 1, 1)",
     "0 -> -1", 19):
        "only reached when len(dims) == 1, so dims[0] and dims[-1] are the same object",
    ("spatial_tf/spec/leaves.py", "return ()", "return x -> return None", 1):
        "the base _key is used only by Replicate, which has no state: any constant key "
        "gives the same equality and hash",
    ("spatial_tf/spec/validation.py", "flatten_with_paths(tree), flatten_with_paths(inputs), strict=True",
     "True -> False", 62):
        "check_cores takes a tree parse(inputs, spec) made leaf by leaf from inputs, so both "
        "flatten to the same length",
    ("spatial_tf/topology/shapes.py", "return [d for d in range(1, n + 1) if n % d == 0]",
     "1 -> 2", 33):
        "range(1, n + 2) adds only n + 1, which divides no n >= 1; n = 0 only comes from "
        "rank_shapes(t, 0), which fails dividing by the 0-core axis either way",
    ("spatial_tf/topology/shapes.py",
     "def block_tasks(topology, shape, stride=(1, 1, 1, 1), origin=(0, 0, 0, 0)):", "0 -> -1", 72):
        "origin core -1 indexes the chip's last core (NumPy wraps it): the same chip, so the "
        "same task, for every block that fits the mesh",
    ("spatial_tf/topology/assignment.py", "if s * st > m or m % (s * st):", "* -> //", 4):
        "s // st > m implies s * st > m, which implies m % (s * st) == m != 0: the "
        "condition stays m % (s * st) != 0 either way",
    ("spatial_tf/topology/assignment.py", "if s * st > m", "> -> >=", 4):
        "reached only when m % (s * st) != 0, so s * st != m and > and >= agree",
    **{("spatial_tf/topology/slices.py",
        '_ONE_HOST_2X4 = (2, 4, 1)  # 8-chip single-host VMs (v5e, v6e "2x4", one host)',
        what, column): "_slice clips each host entry to the slice's chips, and both slices "
        "that use it are 2x4x1 chips: a larger entry clips back to the same one"
       for what, column in (("2 -> 3", 18), ("4 -> 5", 21), ("1 -> 2", 24))},
    ("spatial_tf/topology/slices.py", 'generation = name.rsplit("-", 1)[0]', "1 -> 2", 31):
        "every slice name holds exactly one '-', so splitting at up to 2 gives the same "
        "first part",
    ("spatial_tf/topology/placement.py",
     "where = np.argwhere(leaf.tile_assignment(num_cores) == core)[0]", "0 -> -1", 62):
        "a tile assignment holds each core exactly once, so argwhere finds one row and "
        "[0] and [-1] are that row",
    ("spatial_tf/topology/placement.py",
     "flatten_with_paths(tree), flatten_with_paths(inputs), strict=True", "True -> False", 62):
        "tree is validate(inputs, spec, ...), which has the structure of inputs, so both "
        "flatten to the same length",
}


@dataclasses.dataclass
class Mutant:
    file: str
    index: int  # which mutation site of the file, in walk order
    line: int
    what: str
    source: str  # the mutated line, stripped
    column: int  # where the mutated expression starts in ``source``, from 1

    @property
    def key(self):
        return (self.file, self.source, self.what, self.column)


# ---------------------------------------------------------------- mutation operators

_COMPARE = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In,
}
_BINOP = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
}
_SWAP_NAMES = {"any": "all", "all": "any", "min": "max", "max": "min"}
_SYMBOL = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.Add: "+",
    ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%", ast.BitAnd: "&",
    ast.BitOr: "|", ast.And: "and", ast.Or: "or",
}


def _docstring_nodes(tree):
    """Constant nodes that are docstrings (never mutated)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _is_all_assignment(node):
    return isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
    )


def _sites(tree):
    """Yield ``(node, what, apply)`` for every mutation point; ``apply(node)`` mutates it.

    Walk order is deterministic, so the same source gives the same numbering in the
    parent (which lists mutants) and in the child (which applies one).
    """
    skip = _docstring_nodes(tree)
    skipped_subtrees = set()
    for node in ast.walk(tree):
        if _is_all_assignment(node) or isinstance(node, ast.JoinedStr):
            skipped_subtrees.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skipped_subtrees or id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                new = _COMPARE.get(type(op))
                if new:
                    def apply(n, i=i, new=new):
                        n.ops[i] = new()
                    yield node, f"{_SYMBOL[type(op)]} -> {_SYMBOL[new]}", apply
        elif isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            def apply(n, new=new):
                n.op = new()
            yield node, f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[new]}", apply
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not x -> x", "unwrap"
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
            new = _BINOP[type(node.op)]
            def apply(n, new=new):
                n.op = new()
            yield node, f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[new]}", apply
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                def apply(n):
                    n.value = not n.value
                yield node, f"{node.value} -> {not node.value}", apply
            elif isinstance(node.value, int):
                for delta in (1, -1):
                    def apply(n, delta=delta):
                        n.value = n.value + delta
                    yield node, f"{node.value} -> {node.value + delta}", apply
        elif isinstance(node, ast.Name) and node.id in _SWAP_NAMES and isinstance(node.ctx, ast.Load):
            new = _SWAP_NAMES[node.id]
            def apply(n, new=new):
                n.id = new
            yield node, f"{node.id} -> {new}", apply
        elif isinstance(node, ast.Raise):
            yield node, "delete raise", "pass"
        elif isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None
        ):
            yield node, "return x -> return None", "return_none"
        elif isinstance(node, ast.Continue):
            yield node, "continue -> break", "break"


class _Replace(ast.NodeTransformer):
    """Replace the node with a given id (for mutations that change the node's type)."""

    def __init__(self, target, kind):
        self.target, self.kind = target, kind

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if id(node) != self.target:
            return node
        if self.kind == "unwrap":
            new = node.operand
        elif self.kind == "pass":
            new = ast.Pass()
        elif self.kind == "return_none":
            new = ast.Return(value=ast.Constant(value=None))
        elif self.kind == "break":
            new = ast.Break()
        return ast.copy_location(new, node)


def mutate(source, filename, index):
    """The code object of ``source`` with mutation site ``index`` applied."""
    tree = ast.parse(source, filename)
    for i, (node, _, apply) in enumerate(_sites(tree)):
        if i == index:
            if callable(apply):
                apply(node)
            else:
                tree = _Replace(id(node), apply).visit(tree)
            break
    else:
        raise IndexError(f"{filename}: no mutation site {index}")
    ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec")


def list_mutants(file):
    source = open(os.path.join(ROOT, file)).read()
    lines = source.splitlines()
    tree = ast.parse(source, file)
    out = []
    for i, (node, what, _) in enumerate(_sites(tree)):
        line = lines[node.lineno - 1]
        indent = len(line) - len(line.lstrip())
        out.append(Mutant(file, i, node.lineno, what, line.strip(), node.col_offset - indent + 1))
    return out


# ---------------------------------------------------------------- running one mutant


def module_name(file):
    return file[:-3].replace("/", ".")


def tests_for(file, order=None):
    """The test files of the folder mirroring the module's package, then its doctests.

    The mirrored file (``tests/spec/test_leaves.py`` for ``spec/leaves.py``) runs first,
    then the others fastest first (``order``: measured on the unmutated code), so that
    with ``-x`` a killed mutant stops early.
    """
    package = os.path.dirname(file).split("/", 1)[1]  # spatial_tf/spec/x.py -> spec
    folder = os.path.join("tests", package)
    files = sorted(
        os.path.join(folder, f) for f in os.listdir(folder)
        if f.startswith("test_") and f.endswith(".py")
    )
    mirrored = os.path.join(folder, "test_" + os.path.basename(file))
    order = order or {}
    files.sort(key=lambda f: (f != mirrored, order.get(f, 0.0)))
    return files[:1] + [file] + files[1:]


def _install(code, name):
    """Run ``code`` in module ``name``'s namespace; rebind copies held by other modules.

    "Other modules" are those loaded from this repository (``spatial_tf.spec`` holds
    ``Tile`` from ``spatial_tf.spec.leaves``).
    """
    module = sys.modules[name]
    before = dict(module.__dict__)
    exec(code, module.__dict__)
    changed = {
        k: v for k, v in module.__dict__.items() if k in before and before[k] is not v
    }
    for other in list(sys.modules.values()):
        if other is module or not (getattr(other, "__file__", None) or "").startswith(ROOT):
            continue
        namespace = other.__dict__
        for k, v in list(namespace.items()):
            for old_name, new in changed.items():
                if v is before[old_name]:
                    namespace[k] = new
                    break


def run_child(mutant, pytest_args, order):
    """In the forked child: apply the mutant, run the tests, exit with pytest's code."""
    if not VERBOSE:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    code = 3
    try:
        import pytest

        source = open(os.path.join(ROOT, mutant.file)).read()
        try:
            _install(mutate(source, mutant.file, mutant.index), module_name(mutant.file))
        except Exception:  # the mutant breaks the module at import: any test would fail
            os._exit(1)
        # Two runs: the mirrored test file and the doctests first (most mutants die
        # there, before the other test files are even collected), then the rest.
        paths = tests_for(mutant.file, order)
        code = pytest.main(pytest_args + paths[:2])
        if code == 0 and paths[2:]:
            code = pytest.main(pytest_args + paths[2:])
    finally:
        os._exit(int(code))


VERBOSE = False  # --verbose: children keep their output
# addopts is replaced: the Markdown and notebook runners are plugins, not autoloaded here
PYTEST_ARGS = ["-q", "-p", "no:cacheprovider", "-o", "addopts=--doctest-modules", "-m", "not slow"]


def run_all(mutants, jobs, timeout, order):
    pytest_args = ["-x"] + PYTEST_ARGS
    results = {}
    pending = collections.deque(mutants)
    running = {}  # pid -> (mutant, start time)
    done = 0
    while pending or running:
        while pending and len(running) < jobs:
            mutant = pending.popleft()
            pid = os.fork()
            if pid == 0:
                run_child(mutant, pytest_args, order)
            running[pid] = (mutant, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for p, (m, start) in list(running.items()):
                if now - start > timeout:
                    os.kill(p, signal.SIGKILL)
                    os.waitpid(p, 0)
                    del running[p]
                    results[m.key + (m.index,)] = "timeout"
                    done += 1
            time.sleep(0.02)
            continue
        mutant, _ = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        # pytest's other exit codes (2 interrupted: a collection error under -x, 4 usage
        # error: a parametrized test left with zero cases, 5 no tests) fail the suite too
        results[mutant.key + (mutant.index,)] = (
            "survived" if code == 0 else "killed" if code > 0 else f"error {code}"
        )
        done += 1
        if done % 50 == 0:
            print(f"{done}/{len(mutants)} mutants run", file=sys.stderr, flush=True)
    return [(m, results[m.key + (m.index,)]) for m in mutants]


# ---------------------------------------------------------------- report


def report(outcomes, equivalent, all_keys):
    """Print the table; ``all_keys``: every mutant of the files, before ``--lines``."""
    rows = []
    by_file = collections.defaultdict(list)
    for m, outcome in outcomes:
        by_file[m.file].append((m, outcome))
    total = collections.Counter()
    for file, items in by_file.items():
        n = len(items)
        eq = [m for m, o in items if m.key in equivalent]
        killed = sum(o in ("killed", "timeout") for m, o in items if m.key not in equivalent)
        survived = [m for m, o in items if o == "survived" and m.key not in equivalent]
        errors = [(m, o) for m, o in items if o.startswith("error")]
        score = killed / (n - len(eq)) if n > len(eq) else 1.0
        rows.append((file, n, killed, len(survived), len(eq), score, survived, errors))
        total.update(mutants=n, killed=killed, survived=len(survived), equivalent=len(eq))
    if not rows:
        print("no mutants")
        return 1.0
    width = max(len(r[0]) for r in rows)
    print(f"{'file':<{width}}  mutants  killed  survived  equivalent   score")
    print("-" * (width + 46))
    for file, n, killed, survived, eq, score, _, _ in rows:
        print(f"{file:<{width}}  {n:7d}  {killed:6d}  {survived:8d}  {eq:10d}  {score:6.1%}")
    t = total
    score = t["killed"] / (t["mutants"] - t["equivalent"])
    print(f"{'total':<{width}}  {t['mutants']:7d}  {t['killed']:6d}  {t['survived']:8d}  "
          f"{t['equivalent']:10d}  {score:6.1%}")
    for file, *_, survived, errors in rows:
        if survived:
            print(f"\nsurviving in {file}:")
            for m in survived:
                print(f"  line {m.line:4d} col {m.column:3d}  {m.what:<26}  {m.source}")
        for m, o in errors:
            print(f"  ERROR ({o}) {file} line {m.line}: {m.what}  {m.source}")
    unused = [k for k in equivalent if k[0] in by_file and k not in all_keys]
    for k in unused:
        print(f"\nnote: equivalent entry no longer matches a mutant: {k}")
    return score


def _preload(files):
    """Import once what every child needs: TensorFlow (initialized) and the package."""
    import pytest  # noqa: F401

    for f in files:
        importlib.import_module(module_name(f))
    importlib.import_module("spatial_tf")
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    importlib.import_module("conftest")  # configures the virtual CPUs, as pytest would
    import tensorflow as tf

    tf.reduce_sum(tf.zeros([2]))  # start TensorFlow's runtime before forking
    # Test modules are not imported here: their module-level objects (parameter lists of
    # leaves, say) must be built from the mutated classes, so each child imports them.


def _run_forked(pytest_args):
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        import pytest

        os._exit(int(pytest.main(pytest_args)))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", nargs="+", default=DEFAULT_FILES,
                        help="modules to mutate, relative to the repository root")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds before a mutant's test run counts as killed (hung)")
    parser.add_argument("--lines", type=int, nargs="*", default=None,
                        help="only mutants on these line numbers (with one file)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--verbose", action="store_true", help="show each test run")
    args = parser.parse_args(argv)
    global VERBOSE
    VERBOSE = args.verbose

    os.chdir(ROOT)
    sys.path.insert(0, ROOT)
    # Plugins found through entry points (pytest-benchmark, hypothesis's pytest plugin,
    # ...) cost each child seconds; the tests need none of them (hypothesis's @given
    # runs without its plugin). This makes a run about 3x faster.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    mutants = [m for f in args.files for m in list_mutants(f)]
    all_keys = {m.key for m in mutants}
    if args.lines is not None:
        mutants = [m for m in mutants if m.line in args.lines]
    if args.list:
        for m in mutants:
            print(f"{m.file}:{m.line} col {m.column:3d}  {m.what:<26}  {m.source}")
        print(f"{len(mutants)} mutants")
        return 0

    start = time.monotonic()
    _preload(args.files)
    # The unmutated code must pass, or every mutant would look killed.
    paths = sorted({p for f in args.files for p in tests_for(f)})
    code = _run_forked(PYTEST_ARGS + paths)
    if code != 0:
        print(f"the tests fail on the unmutated code (pytest exit {code}); fix them first: "
              f"python -m pytest {' '.join(paths)}", file=sys.stderr)
        return 2
    order = {}

    outcomes = run_all(mutants, args.jobs, args.timeout, order)
    elapsed = time.monotonic() - start
    equivalent = {k: v for k, v in EQUIVALENT.items()}
    score = report(outcomes, equivalent, all_keys)
    listed = [(k, r) for k, r in EQUIVALENT.items() if k[0] in args.files]
    if listed:
        print("\nequivalent mutants (not counted):")
        for (file, source, what, column), reason in listed:
            print(f"  {file}: {what:<26} col {column:3d}  {source}\n      {reason}")
    print(f"\n{len(mutants)} mutants in {elapsed / 60:.1f} min with {args.jobs} job{'' if args.jobs == 1 else 's'}")
    return 0 if score >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
