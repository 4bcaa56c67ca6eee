"""docs/troubleshooting.md and its pages under docs/troubleshooting/ list every error
message the package raises, each on the page of the area whose module raises it."""
import importlib.util
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
INDEX = ROOT / "docs" / "troubleshooting.md"
PAGES_DIR = ROOT / "docs" / "troubleshooting"


def _load():
    spec = importlib.util.spec_from_file_location("error_messages", ROOT / "docs" / "error_messages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


error_messages = _load()
SITES = list(error_messages.raise_sites())
PAGES = sorted(PAGES_DIR.glob("*.md"))


def _cases(items, what, ids=None):
    """``items`` for parametrize; a single failing case when there are none, so that a test
    that collects nothing fails instead of being skipped."""
    items = list(items)
    if not items:
        return [pytest.param(None, id=f"no-{what}")]
    return [pytest.param(item, id=ids(item) if ids else None) for item in items]


def _needs(case, what):
    assert case is not None, f"no {what} were collected; expected some (is the page list or the extractor broken?)"


def _flat(path):
    return " ".join(path.read_text().split())


def _rel(path):
    return str(path.relative_to(ROOT))


TEXTS = {page: _flat(page) for page in [INDEX, *PAGES]}


def _page_file(site):
    page = error_messages.page_of(site.path)
    return None if page is None else ROOT / error_messages.page_path(page)


# --- anchors and links ---------------------------------------------------------------

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ID = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")


def _slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path):
    anchors, seen, fenced = set(), {}, False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        anchors.update(_HTML_ID.findall(line))
        match = _HEADING.match(line)
        if match:
            slug = _slug(match.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _headings(path):
    return {m.group(2) for m in map(_HEADING.match, path.read_text().splitlines()) if m}


_MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a reference to a troubleshooting page in any text: docs/troubleshooting.md#x,
# troubleshooting/data.md, ../troubleshooting.md ...
_REFERENCE = re.compile(r"[\w.\-/]*troubleshooting(?:\.md|/[\w.\-]+\.md)(?:#[\w\-]+)?")
# a section named after the page: (docs/troubleshooting.md, "The most common ones")
_NAMED_SECTION = re.compile(r"([\w.\-/]*troubleshooting(?:\.md|/[\w.\-]+\.md)),?\s+[\"“]([^\"”]+)[\"”]")


def _files_that_may_refer():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "notebooks").rglob("*.ipynb")), *sorted((ROOT / "spatial_tf").rglob("*.py"))]
    return [f for f in files if ".ipynb_checkpoints" not in f.parts]


def _text_of(path):
    if path.suffix == ".ipynb":  # the cells' text, not the JSON's escapes
        cells = json.loads(path.read_text()).get("cells", [])
        return "\n".join("".join(c.get("source", [])) for c in cells)
    return path.read_text()


def _links():
    """(file, target) of every link on the troubleshooting pages and every reference to a
    troubleshooting page elsewhere."""
    found = set()
    for page in [INDEX, *PAGES]:
        for target in _MD_LINK.findall(page.read_text()):
            if not re.match(r"[a-z]+:", target):  # not http:, mailto: ...
                found.add((page, target))
    for path in _files_that_may_refer():
        text = _text_of(path)
        for target in _MD_LINK.findall(text):
            if _REFERENCE.fullmatch(target):
                found.add((path, target))
        for target in _REFERENCE.findall(_MD_LINK.sub(" ", text)):  # mentions outside links
            found.add((path, target))
    return sorted(found)


def _resolve(source, target):
    """The file a link or reference points to: relative to the file it is in, else (for a
    path written from the repository's root, as in code and notebooks) to the root."""
    file_part = target.split("#", 1)[0]
    if not file_part:
        return source
    for base in (source.parent, ROOT):
        candidate = (base / file_part).resolve()
        if candidate.exists():
            return candidate
    return None


LINKS = _links()


# --- the tests -------------------------------------------------------------------------

def test_the_raise_sites_are_found():
    # hand-picked sites, written from the package's behaviour, not from the extractor
    assert len(SITES) > 100
    assert any(s.path == "spatial_tf/data/pipeline.py" and s.function == "distribute"
               and "does not divide over" in s.template for s in SITES)
    assert any(s.path == "spatial_tf/__init__.py" and s.exception == "ImportError"
               and s.fragment.startswith("spatial_tf needs TensorFlow") for s in SITES)
    assert any(s.exception == "TPUUnavailableError" for s in SITES)


def test_the_pages_are_found():
    # hand-picked: the areas a reader looks for first
    names = {p.stem for p in PAGES}
    assert {"spec", "topology", "emulator", "data", "commands"} <= names, names
    assert len(PAGES) >= 10
    assert error_messages.page_of("spatial_tf/data/pipeline.py") == "data"
    assert error_messages.page_of("spatial_tf/strategy.py") == "topology"
    assert error_messages.page_of("spatial_tf/emulator/diagnose/parity.py") == "emulator"


@pytest.mark.parametrize("page", _cases(sorted(set(error_messages.PAGES) | {p.stem for p in PAGES}), "pages"))
def test_each_area_has_its_page(page):
    _needs(page, "pages")
    path = ROOT / error_messages.page_path(page)
    assert page in error_messages.PAGES, (
        f"{_rel(path)} is an area no module belongs to. Fix: add it to PAGES in "
        f"docs/error_messages.py with the modules whose messages it lists, or remove it.")
    assert path.exists(), (
        f"PAGES in docs/error_messages.py names {page!r}, but {_rel(path)} does not exist. "
        f"Fix: write the page (python docs/error_messages.py --markdown {page} prints its "
        f"entries) and link it from docs/troubleshooting.md.")


@pytest.mark.parametrize("site", _cases(SITES, "raise-sites", ids=lambda s: f"{s.path}:{s.line}"))
def test_every_module_belongs_to_an_area(site):
    _needs(site, "raise sites")
    assert error_messages.page_of(site.path) is not None, (
        f"{site.path} raises errors but belongs to no troubleshooting page. Fix: add it to "
        f"PAGES in docs/error_messages.py (the area of its sub-package, see docs/architecture.md).")


def _not_listed(site):
    page = _page_file(site)
    where = f"docs/troubleshooting/{page.name}" if page else "its area's page"
    return (f"{site.path}:{site.line} raises {site.exception}({site.template[:80]!r}...), which "
            f"no troubleshooting page lists. Fix: add its entry to {where} under "
            f"`{site.path}` (python docs/error_messages.py --markdown "
            f"{page.stem if page else ''} prints it) and describe the fix.")


LISTED = _cases([s for s in SITES if s.fragment], "messages", ids=lambda s: f"{s.path}:{s.line}")


@pytest.mark.parametrize("site", LISTED)
def test_message_is_in_troubleshooting(site):
    _needs(site, "messages")
    fragment = " ".join(site.fragment.split())
    assert any(fragment in text for text in TEXTS.values()), _not_listed(site)


@pytest.mark.parametrize("site", LISTED)
def test_message_is_on_its_areas_page(site):
    _needs(site, "messages")
    fragment = " ".join(site.fragment.split())
    page = _page_file(site)
    assert page is not None, f"{site.path} belongs to no troubleshooting page (see PAGES)"
    if page in TEXTS and fragment in TEXTS[page]:
        return
    elsewhere = [_rel(p) for p, text in TEXTS.items() if fragment in text]
    assert not elsewhere, (
        f"{site.path}:{site.line}'s message ({site.template[:60]!r}...) is found on "
        f"{', '.join(elsewhere)}, but {site.path}'s messages belong on {_rel(page)}. Fix: move "
        f"its entry there, under `{site.path}` (or, if those words are another message's, "
        f"add this one's: python docs/error_messages.py --markdown {page.stem} prints it).")
    pytest.fail(_not_listed(site))


def test_messages_without_literal_text_are_the_parity_reports():
    # ParityError carries compare()'s table only; its area's page explains it by name
    bare = [s for s in SITES if not s.fragment]
    assert {s.exception for s in bare} == {"ParityError"}
    for site in bare:
        assert "ParityError" in TEXTS[_page_file(site)], site


def test_the_index_keeps_its_introduction_and_the_most_common_ones():
    # spatial_tf/models/retinanet.py refers readers to this section by its title
    assert "The most common ones" in _headings(INDEX)
    text = TEXTS[INDEX]
    assert "TPUUnavailableError" in text and "pad_to_multiple" in text


@pytest.mark.parametrize("page", _cases(PAGES, "pages", ids=lambda p: p.name))
def test_every_page_is_linked_from_the_index(page):
    _needs(page, "pages")
    linked = {_resolve(INDEX, target) for source, target in LINKS if source == INDEX}
    assert page.resolve() in linked, (
        f"docs/troubleshooting.md does not link {_rel(page)}. Fix: add it to the list of "
        f"areas with one line on what it covers.")


@pytest.mark.parametrize("link", _cases(LINKS, "links", ids=lambda l: f"{_rel(l[0])}->{l[1]}"))
def test_troubleshooting_links_resolve(link):
    _needs(link, "links")
    source, target = link
    path = _resolve(source, target)
    assert path is not None, f"{_rel(source)} links {target!r}, which does not exist"
    if "#" in target and path.suffix == ".md":
        anchor = target.split("#", 1)[1]
        assert anchor in _anchors(path), (
            f"{_rel(source)} links {target!r}, but {path.relative_to(ROOT)} has no heading or "
            f"anchor {anchor!r}. Fix: link the page that holds that module's messages now "
            f"(docs/troubleshooting/<area>.md#...).")


def test_the_links_are_found():
    # hand-picked: the README's link to the index and the index's links to its pages
    assert any(source.name == "README.md" and target.endswith("docs/troubleshooting.md")
               for source, target in LINKS)
    assert sum(1 for source, target in LINKS if source == INDEX
               and target.startswith("troubleshooting/")) >= len(PAGES) >= 10


def test_sections_named_after_a_page_exist():
    named = [(path, m.group(1), m.group(2)) for path in _files_that_may_refer()
             for m in _NAMED_SECTION.finditer(_text_of(path))]
    assert named, "expected spatial_tf/models/retinanet.py's reference to \"The most common ones\""
    for source, target, section in named:
        page = _resolve(source, target)
        assert page is not None and section in _headings(page), (
            f"{_rel(source)} names the section {section!r} of {target}, which has no such heading")


def test_markdown_names_the_page_of_each_entry():
    data = error_messages.markdown("data")
    assert "<!-- page: docs/troubleshooting/data.md -->" in data
    assert "## `spatial_tf/data/pipeline.py`" in data and "spatial_tf/viz.py" not in data
    every = error_messages.markdown()
    assert every.count("<!-- page: ") == len({error_messages.page_of(s.path) for s in SITES})


def test_extractor_reads_f_strings_and_concatenation(tmp_path):
    import ast
    node = ast.parse('f"{where}: size {n} does not divide. Fix: pad." + " more"', mode="eval").body
    assert error_messages._template(node) == "{…}: size {…} does not divide. Fix: pad. more"
