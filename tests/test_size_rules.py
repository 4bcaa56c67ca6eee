"""The size rules of docs/architecture.md: no function over 60 lines, no public function
over 8 parameters, README.md at most 200 lines (the rest lives in docs/)."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "spatial_tf"
MAX_LINES, MAX_PARAMETERS, README_LINES = 60, 8, 200


def functions(root=PACKAGE):
    """(``path:line name``, lines, parameters, public) of every function under ``root``;
    ``self``/``cls`` and ``*args``/``**kwargs`` are not counted as parameters."""
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                named = a.posonlyargs + a.args + a.kwonlyargs
                count = len(named) - (1 if named and named[0].arg in ("self", "cls") else 0)
                where = f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"
                yield where, node.end_lineno - node.lineno + 1, count, \
                    not node.name.startswith("_")


def test_the_rules_see_long_functions_and_many_parameters(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (tmp_path / "m.py").write_text(
        f"def long():\n{body}\n\ndef wide(self, a, b, c, d, e, f, g, h, *r, **k):\n    pass\n"
        f"\ndef _private(a, b, c, d, e, f, g, h, i):\n    pass\n")
    found = {where.split()[-1]: (lines, count, public)
             for where, lines, count, public in functions(tmp_path)}
    assert found == {"long": (61, 0, True), "wide": (2, 8, True), "_private": (2, 9, False)}


def test_no_function_is_over_60_lines():
    long = [f"{where} ({lines} lines)" for where, lines, _, _ in functions() if lines > MAX_LINES]
    assert long == [], "split these into helpers of one job each"


def test_no_public_function_has_over_8_parameters():
    wide = [f"{where} ({count} parameters)" for where, _, count, public in functions()
            if public and count > MAX_PARAMETERS]
    assert wide == [], "group related parameters in an options object, as PlanOptions does"


def test_readme_is_at_most_200_lines():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines; move detail to docs/"


@pytest.mark.parametrize("where", ["spatial_tf/planning/plan.py", "spatial_tf/layers.py"])
def test_the_scan_reads_the_package(where):
    assert any(w.startswith(where) for w, _, _, _ in functions())
