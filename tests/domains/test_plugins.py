"""Domains are plugins: a package of the user's that declares an entry point in the group
`whale.domains` is found by name with no change to the workbench; a broken one is named."""

import os
import subprocess
import sys

import pytest

from app.domains import get_domain, known_domains

# the module's tests share one install of the toy package: under xdist they run on one worker
pytestmark = pytest.mark.xdist_group("plugins")

TOY = """
from pathlib import Path
from app.domains import Task


class Toy:
    name = "toy"
    tools = {}
    forbidden_modules = frozenset()
    seed_harness = Path(__file__).with_name("seed.py")

    def tasks(self, split):
        return [Task(f"{split}-0", {"question": "What is 3 + 4?"}, "7")]

    def score(self, answer, task):
        return float(answer == task.gold)
"""
PYPROJECT = """
[project]
name = "whale-toy-domain"
version = "0.1"

[tool.setuptools]
packages = ["toydomain"]

[project.entry-points."whale.domains"]
toy = "toydomain:Toy"
broken = "toydomain:Missing"
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The toy package pip-installed into its own folder; the environment that sees it."""
    root = tmp_path_factory.mktemp("plugin")
    (root / "pkg" / "toydomain").mkdir(parents=True)
    (root / "pkg" / "toydomain" / "__init__.py").write_text(TOY)
    (root / "pkg" / "pyproject.toml").write_text(PYPROJECT)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(root / "site"),
            str(root / "pkg"),
        ],
        check=True,
        capture_output=True,
    )
    return {**os.environ, "PYTHONPATH": str(root / "site")}


def in_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_an_installed_package_adds_a_domain(installed):
    done = in_python(
        "from app.domains import get_domain, known_domains\n"
        "toy = get_domain('toy'); task = toy.tasks('test')[0]\n"
        "print(known_domains(), toy.score('7', task), toy.score('8', task))",
        installed,
    )
    assert done.returncode == 0, done.stderr
    assert "'arith'" in done.stdout and "'toy'" in done.stdout and "1.0 0.0" in done.stdout


def test_a_broken_plugin_is_named_with_its_error(installed):
    done = in_python("from app.domains import get_domain\nget_domain('broken')", installed)
    assert done.returncode != 0
    assert "domain 'broken' (toydomain:Missing) failed to load: AttributeError" in done.stderr


def test_an_unknown_domain_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown domain 'nope'; known: .*arith"):
        get_domain("nope")
    assert "arith" in known_domains()
