"""README.md and docs/: every public name they write resolves, every page is linked, every link lands.

Names are `kte.Name`, `keras_tpu_estimator.x.y` and `from keras_tpu_estimator... import a, b`
(then `a.attr` inside the same python code block). Module paths written as files
(`engine/runner.py`, `keras_tpu_estimator/host/loop.py`) describe the internal layout; of those,
only paths to public modules are checked to exist.
"""

import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]

# Top-level names users import: their file paths must exist (as `name.py` or `name/`).
PUBLIC_MODULES = {"__init__", "__main__", "estimator", "tpu_estimator", "export", "callbacks", "versions", "examples"}

IDENT = r"[A-Za-z_]\w*"
DOTTED = rf"{IDENT}(?:\.{IDENT})*"
KTE_NAME = re.compile(rf"(?<![\w.])kte\.({DOTTED})")
PACKAGE_NAME = re.compile(rf"(?<![\w./])(keras_tpu_estimator(?:\.{IDENT})+)")
FROM_IMPORT = re.compile(
    rf"\bfrom\s+(keras_tpu_estimator(?:\.{IDENT})*)\s+import\s+({IDENT}(?:\s+as\s+{IDENT})?"
    rf"(?:\s*,\s*{IDENT}(?:\s+as\s+{IDENT})?)*)"
)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
PACKAGE_PATH = re.compile(r"(?<![\w/])keras_tpu_estimator/([\w./]+)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def page_names(text: str) -> set[str]:
    """The dotted public names a page writes, as `keras_tpu_estimator.<...>`."""
    names = {f"keras_tpu_estimator.{name}" for name in KTE_NAME.findall(text)}
    names |= set(PACKAGE_NAME.findall(text))
    for module, imported in FROM_IMPORT.findall(text):
        for item in imported.split(","):
            names.add(f"{module}.{item.split()[0]}")
    for block in PYTHON_BLOCK.findall(text):
        for module, imported in FROM_IMPORT.findall(block):
            for item in imported.split(","):
                words = item.split()
                alias = words[-1]
                for attr in re.findall(rf"(?<![\w.]){alias}\.({DOTTED})", block):
                    names.add(f"{module}.{words[0]}.{attr}")
    return names


def resolves(dotted: str) -> bool:
    """Whether `dotted` is a module, or an attribute chain under the longest importable module."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[cut:]:
                value = getattr(value, attr)
        except AttributeError:
            return False
        return True
    return False


def all_names() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for page in PAGES:
        for name in page_names(page.read_text()):
            found.setdefault(name, set()).add(str(page.relative_to(ROOT)))
    return found


def test_readme_and_docs_names_resolve():
    found = all_names()
    assert len(found) > 20, sorted(found)  # the parser still sees the pages' names
    missing = {name: sorted(pages) for name, pages in found.items() if not resolves(name)}
    assert not missing, missing


def test_readme_parser_reads_imports_and_aliases():
    text = (
        "`kte.TPUConfig(iterations_per_loop=2)` and `keras_tpu_estimator.versions tf_keras`\n"
        "```python\nfrom keras_tpu_estimator import export, tpu_estimator as te\n"
        "export.ServingInputReceiver\nte.BatchConfig(1)\n```\n"
    )
    assert page_names(text) == {
        "keras_tpu_estimator.TPUConfig",
        "keras_tpu_estimator.versions",
        "keras_tpu_estimator.export",
        "keras_tpu_estimator.tpu_estimator",
        "keras_tpu_estimator.export.ServingInputReceiver",
        "keras_tpu_estimator.tpu_estimator.BatchConfig",
    }
    assert not resolves("keras_tpu_estimator.NoSuchName")


def test_readme_public_paths_exist():
    """`keras_tpu_estimator/<public module>...` paths exist; wing-internal paths are only collected."""
    paths = {path.rstrip(".") for page in PAGES for path in PACKAGE_PATH.findall(page.read_text())}
    public = {path for path in paths if pathlib.PurePosixPath(path).parts[0].removesuffix(".py") in PUBLIC_MODULES}
    package = ROOT / "keras_tpu_estimator"
    for path in public:
        top = pathlib.PurePosixPath(path).parts[0].removesuffix(".py")
        assert (package / f"{top}.py").exists() or (package / top).is_dir(), path


def test_readme_links_every_docs_page():
    linked = {(ROOT / link).resolve() for link in LINK.findall(README.read_text())}
    unlinked = [str(page.relative_to(ROOT)) for page in PAGES[1:] if page.resolve() not in linked]
    assert not unlinked, f"pages missing from README's 'Read on': {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_readme_and_docs_links_land(page):
    for link in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target = (page.parent / link.split("#", 1)[0]).resolve()
        assert target.exists(), f"{page.relative_to(ROOT)} links to {link}, which does not exist"
