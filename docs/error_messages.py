"""Every error message spatial_tf raises, read from the source (used by troubleshooting's test).

``python docs/error_messages.py`` prints one line per raise site: the file, the function,
the exception and the message's literal text with ``{…}`` for what is filled in.

``python docs/error_messages.py --markdown [PAGE]`` prints the entries in the form of the
troubleshooting pages, under the page each belongs on: a module's messages go on the
page of its area (``PAGES``, module path -> ``docs/troubleshooting/<page>.md``), under
the module's heading. ``PAGE`` (e.g. ``data``) prints that page's entries only.
"""
import ast
import pathlib
from typing import Iterator, NamedTuple

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "spatial_tf"


# The troubleshooting pages, one per area of the package, and the modules whose messages
# each lists: a path prefix ending in "/" is a sub-package, any other is one module.
PAGES = {
    "package": ("spatial_tf/__init__.py", "spatial_tf/__main__.py", "spatial_tf/_tf_internals.py",
                "spatial_tf/checks.py", "spatial_tf/context.py", "spatial_tf/logs.py",
                "spatial_tf/tpu_generations.py", "spatial_tf/frames.py",
                "spatial_tf/table.py"),
    "spec": ("spatial_tf/spec/", "spatial_tf/annotate.py", "spatial_tf/summarize.py"),
    "topology": ("spatial_tf/topology/", "spatial_tf/devices.py", "spatial_tf/strategy.py"),
    "emulator": ("spatial_tf/emulator/",),
    "layers-and-losses": ("spatial_tf/halo_conv.py", "spatial_tf/partition_friendly.py",
                          "spatial_tf/layers.py", "spatial_tf/label_inputs.py",
                          "spatial_tf/losses.py", "spatial_tf/metrics.py",
                          "spatial_tf/resize.py", "spatial_tf/per_frame.py",
                          "spatial_tf/resize_layers.py", "spatial_tf/space_to_depth.py"),
    "planning": ("spatial_tf/planning/",),
    "testing": ("spatial_tf/testing/",),
    "data": ("spatial_tf/data/",),
    "models": ("spatial_tf/models/",),
    "detection": ("spatial_tf/detection/",),
    "train": ("spatial_tf/steps.py", "spatial_tf/train/"),
    "viz": ("spatial_tf/viz.py",),
    "commands": ("spatial_tf/commands/",),
}


def page_of(path: str):
    """The troubleshooting page (``docs/troubleshooting/<page>.md``) that lists the
    messages of the module at ``path`` (relative to the repository root), or None for a
    module in no area yet (add it to ``PAGES``)."""
    for page, modules in PAGES.items():
        if any(path.startswith(m) if m.endswith("/") else path == m for m in modules):
            return page
    return None


def page_path(page: str) -> str:
    return f"docs/troubleshooting/{page}.md"


class RaiseSite(NamedTuple):
    path: str        # relative to the repository root
    line: int
    function: str
    exception: str
    template: str    # the message with "{…}" where values are formatted in
    fragment: str    # the first literal piece of 20+ characters (else the longest)


def _template(node) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{…}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _template(node.left) + _template(node.right)
    return "{…}"


def raise_sites() -> Iterator[RaiseSite]:
    """Yield every ``raise SomethingError(message)`` in the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        functions = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for child in ast.walk(node):
                    functions.setdefault(id(child), node.name)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if not name.endswith("Error") or not node.exc.args:
                continue
            template = _template(node.exc.args[0])
            pieces = [p.strip() for p in template.split("{…}") if p.strip()]
            long = [p for p in pieces if len(p) >= 20]
            fragment = long[0] if long else max(pieces, key=len, default="")
            yield RaiseSite(str(path.relative_to(PACKAGE.parent)), node.lineno,
                            functions.get(id(node), "<module>"), name, template, fragment)




_NOTES = {
    "ParityError": ("the partitioned step computed something other than the unpartitioned "
                    "one (the message is compare()'s table).",
                    "read the rows marked ERROR: the output or variable named there differs. "
                    "Usually an op that does not partition correctly or a loss that depends "
                    "on the split; report it with the table if the step is plain TensorFlow."),
    "AssertionError": ("XLA gathered an activation-sized tensor: the split does not survive "
                       "the TensorFlow ops named in the message.",
                       "rewrite those ops so they keep the split (spatial_tf.losses instead of "
                       "a flattening loss, spatial_tf.layers.Split to pin a split), or accept "
                       "the gather."),
    "RuntimeError": ("this TensorFlow version lays out its compiled XLA programs differently "
                     "from the versions spatial_tf was checked with.",
                     "use a TensorFlow version from docs/install.md's compatibility table and "
                     "report the version you used."),
}


def _entry(site: RaiseSite) -> str:
    text = " ".join(site.template.split())
    cause, _, fix = text.partition("Fix:")
    if site.exception in _NOTES and (site.template == "{…}" or not fix.strip()):
        cause, fix = _NOTES[site.exception][0], _NOTES[site.exception][1]
    elif not fix:
        fix = ("pass a value as the message's \"expected\" part says" if "expected" in text
               else "the message names the argument and its value: correct it")
    note = f"  Cause: {cause.strip()}  \n" if site.exception in _NOTES and site.template == "{…}" else ""
    return (f"- **{site.exception}** from `{site.function}`\n\n  ```text\n  {text}\n  ```\n\n"
            f"{note}  Fix: {fix.strip()}\n")


def markdown(page=None) -> str:
    """The generated part of the troubleshooting pages: every message, under the page it
    belongs on (a comment naming the page's file), grouped by module; ``page`` keeps one
    page's messages only."""
    out, current, module = [], None, None
    order = {name: i for i, name in enumerate(PAGES)}
    sites = sorted(raise_sites(), key=lambda s: (order.get(page_of(s.path), len(order)), s.path, s.line))
    for site in sites:
        site_page = page_of(site.path)
        if page is not None and site_page != page:
            continue
        if site_page != current or module is None:
            current = site_page
            where = (page_path(site_page) if site_page else
                     "none yet; add this module to PAGES in docs/error_messages.py")
            out.append(f"\n<!-- page: {where} -->\n")
        if site.path != module:
            module = site.path
            out.append(f"\n## `{module}`\n")
        out.append(_entry(site))
    return "\n".join(out)


MARKER = "<!-- generated by: python docs/error_messages.py --markdown -->"


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--markdown"] and len(sys.argv) <= 3:
        wanted = sys.argv[2].removesuffix(".md").rsplit("/", 1)[-1] if sys.argv[2:] else None
        if wanted is not None and wanted not in PAGES:
            sys.exit(f"--markdown: no page {wanted!r}; expected one of {', '.join(PAGES)}.")
        print(MARKER)
        print(markdown(wanted))
    else:
        for site in raise_sites():
            print(f"{site.path}:{site.line} {site.function} {site.exception}: {site.template}")
