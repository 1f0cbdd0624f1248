"""scripts/setup.sh: the README's two commands, run in order on a machine with empty caches.

The first (`bash scripts/setup.sh`) builds the environment without the tests' packages, the
second (`bash scripts/test.sh`, which runs `setup.sh --test`) must not reuse it as if it had
them: the cache key depends on the packages, and `--test` checks that what the tests import is
importable rather than trusting the folder's name.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

SETUP = REPO / "scripts" / "setup.sh"


def key(*args: str, repo: Path = REPO) -> str:
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "setup.sh"), *args, "--print-key"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_environment_key_depends_on_the_test_packages():
    plain, test = key(), key("--test")
    assert len(plain) == len(test) == 16
    assert plain != test


def test_the_key_follows_the_dependency_lists(tmp_path):
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(SETUP, copy / "scripts" / "setup.sh")
    pyproject = (REPO / "pyproject.toml").read_text()
    (copy / "pyproject.toml").write_text(pyproject)
    before = key("--test", repo=copy)
    (copy / "pyproject.toml").write_text(
        pyproject.replace('"pytest-xdist>=3.6"', '"pytest-xdist>=3.7"')
    )
    assert key("--test", repo=copy) != before
    assert key(repo=copy) == key()  # the tests' list is not part of the plain environment's key


def test_an_unknown_argument_is_refused():
    done = subprocess.run(["bash", str(SETUP), "--tset"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "unknown argument --tset" in done.stderr


def _clone(tmp_path: Path) -> Path:
    """The work tree as a fresh clone sees it: tracked and new files, no environment."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    clone = tmp_path / "clone"
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    return clone


@pytest.mark.slow
def test_readme_order_with_empty_caches_leaves_the_tests_runnable(tmp_path):
    """setup.sh, then setup.sh --test, against an empty WHALE_CACHE (pip's download cache is
    used): afterwards pytest and ruff run from the clone's .venv."""
    clone = _clone(tmp_path)
    # No bytecode: the two environments' .pyc files are not what this test is about, and
    # compiling torch's and the others' thousands of files took most of pip's time. PIP_COMPILE,
    # not PIP_NO_COMPILE: pip stores a variable's value in its option's destination as it is,
    # and --no-compile's is `compile`, so PIP_NO_COMPILE=1 compiles (seen: it wrote the .pyc).
    env = {**os.environ, "WHALE_CACHE": str(tmp_path / "cache"), "PIP_COMPILE": "false"}
    for args in ([], ["--test"]):
        done = subprocess.run(
            ["bash", "scripts/setup.sh", *args],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    python = clone / ".venv" / "bin" / "python"
    for module in ("pytest", "ruff"):
        done = subprocess.run(
            [str(python), "-m", module, "--version"], capture_output=True, text=True, cwd=clone
        )
        assert done.returncode == 0, f"{module}: {done.stderr}"
    # Two environments, one per dependency set: the plain one was not reused for the tests.
    assert len(list((tmp_path / "cache").glob("venv-*/.complete"))) == 2
