"""docs/layout.md names every module of app/, sandbox/ and benchmarks/, each with its line, and
names none that is gone: a module added, moved or renamed without the page fails here."""

import ast
import re

from tests.conftest import REPO

LAYOUT = REPO / "docs" / "layout.md"
PACKAGES = ("app", "sandbox", "benchmarks")


def listed() -> dict[str, str]:
    """{path: its line} of the layout's block: an unindented `folder/` line opens a folder, a
    line indented by two spaces names a file of it; deeper lines go on the line above."""
    block = re.search(r"```\n(.*?)```", LAYOUT.read_text(), re.S).group(1)
    paths: dict[str, str] = {}
    folder = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        name, _, what = line.strip().partition(" ")
        if not line.startswith(" "):
            folder = name if name.endswith("/") else ""
            paths[name] = what.strip()
        elif line.startswith("  ") and not line.startswith("   "):
            paths[folder + name] = what.strip()
    return paths


def defines_something(path) -> bool:
    """A function, a class or a name of its own (`__all__`, a list of names handed on, is none)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return True
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) != "__all__" for t in node.targets
        ):
            return True
    return False


def modules() -> list[str]:
    """Every module and script of the packages; a package's __init__.py or __main__.py only
    where it defines something of its own (not one that only hands names on or calls main)."""
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*")):
            if path.suffix not in (".py", ".sh") or "__pycache__" in path.parts:
                continue
            if path.name in ("__init__.py", "__main__.py") and not defines_something(path):
                continue
            found.append(path.relative_to(REPO).as_posix())
    return found


def test_every_module_has_its_line():
    paths = listed()
    missing = [m for m in modules() if m not in paths]
    assert not missing, f"docs/layout.md does not name {missing}"
    unsaid = [m for m in modules() if not paths[m]]
    assert not unsaid, f"docs/layout.md names {unsaid} without saying what they are"


def test_the_layout_names_no_module_that_is_gone():
    gone = [
        path for path in listed() if path.split("/")[0] in PACKAGES and not (REPO / path).exists()
    ]
    assert not gone, f"docs/layout.md names {gone}, which are not there"


def test_the_reading_of_the_layout_sees_folders_and_their_files():
    """The parser the checks above rest on: a folder's files get its path, continuation lines
    (indented deeper) are no files, and a top-level file stands alone."""
    paths = listed()
    assert paths["app/read/"].startswith("the read side")
    assert paths["app/read/common.py"].startswith("what every resource module shares")
    assert paths["app/config.py"].startswith("settings")
    assert paths["sandbox/process.py"].startswith("the `process` backend")
    # a continuation line (app/db/steps.py's "load_steps to read them back whole") is no file
    assert not any("load_steps" in p for p in paths)
    assert paths["app/db/steps.py"].startswith("how steps are stored")
