"""The code's shape: no function of the workbench (app/), its confinement (sandbox/) or its
benchmarks is over 100 lines, and ruff keeps each within complexity 15 (C901, configured in
pyproject.toml, run by scripts/test.sh). A long function is split into the named steps it
narrates, each readable by itself."""

import ast
import tomllib

from tests.conftest import REPO

MAX_LINES = 100
MAX_COMPLEXITY = 15
CHECKED = ("app", "sandbox", "benchmarks")


def long_functions(root) -> list[str]:
    """Every function or method under `root` longer than MAX_LINES, from its `def` line to its
    last, as "path:line name (n lines)", the path relative to `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    where = path.relative_to(root)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_over_100_lines():
    found = [f"{folder}/{f}" for folder in CHECKED for f in long_functions(REPO / folder)]
    assert found == [], "split these into named steps:\n" + "\n".join(found)


def test_the_walk_finds_a_long_method(tmp_path):
    """Methods and async functions count, from `def` to the last line: 100 lines pass, 101
    do not."""

    def function(header: str, indent: str, lines: int) -> str:
        return header + "".join(f"\n{indent}x{i} = {i}" for i in range(lines - 1)) + "\n"

    (tmp_path / "ok.py").write_text(function("def fits():", "    ", MAX_LINES))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text(
        "class A:\n" + function("    async def over(self):", "        ", MAX_LINES + 1)
    )
    assert long_functions(tmp_path) == [f"pkg/long.py:2 over ({MAX_LINES + 1} lines)"]


def test_ruff_checks_complexity():
    lint = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"]
    assert lint["mccabe"]["max-complexity"] == MAX_COMPLEXITY
