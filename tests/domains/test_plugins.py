"""Domains and proposers are plugins: a package of the user's that declares an entry point in
the group `whale.domains` or `whale.proposers` is found by name with no change to the
workbench; a broken one is named."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.domains import get_domain, known_domains
from tests.conftest import whale

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


class StyleProposer:
    # proposes the accepted harness with PROMPT_STYLE set to [search.options] style

    name = "style"

    def __init__(self, style):
        self.style = style

    async def propose(self, ctx):
        from app.search.candidate import Candidate, Proposal
        from app.search.knobs import with_knob

        code = with_knob(ctx.accepted.code, "PROMPT_STYLE", self.style)
        return Proposal([Candidate(f"style-{self.style}.py", code, hypothesis="terser")],
                        report=f"asked for {self.style}")


def style_proposer(cfg, workbench):
    return StyleProposer(cfg.options.get("style", "answer_only"))
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

[project.entry-points."whale.proposers"]
style = "toydomain:style_proposer"
broken = "toydomain:missing_proposer"
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


def test_an_installed_package_adds_a_proposer(installed, whale_env):
    env = {**whale_env, "PYTHONPATH": installed["PYTHONPATH"]}
    parsed = in_python(
        "from app.loop.experiment_file import parse\n"
        'e = parse(\'name = "x"\\n[search]\\nproposer = "style"\\n'
        '[search.options]\\nstyle = "step_by_step"\\n\')\n'
        "print(e.search.proposer, e.search.options)",
        env,
    )
    assert parsed.returncode == 0, parsed.stderr
    assert "style {'style': 'step_by_step'}" in parsed.stdout
    args = ["--proposer", "style", "--iterations", "1", "--candidates", "1", "--tasks", "2"]
    done = whale("search", *args, "--json", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    proposers = {h["name"]: h["proposer"] for h in summary["harnesses"]}
    assert proposers["style-answer_only.py"] == "style", proposers
    assert [it["status"] for it in summary["iterations"]] == ["done", "done"]
    with sqlite3.connect(Path(whale_env["WHALE_HOME"]) / "whale.db") as db:
        (code,) = db.execute(
            "SELECT code FROM harness WHERE name = 'style-answer_only.py'"
        ).fetchone()
    assert "PROMPT_STYLE = 'answer_only'" in code or 'PROMPT_STYLE = "answer_only"' in code


def test_a_broken_or_unknown_proposer_is_named(installed, whale_env):
    env = {**whale_env, "PYTHONPATH": installed["PYTHONPATH"]}
    broken = whale("search", "--proposer", "broken", "--iterations", "1", env=env)
    assert broken.returncode != 0
    assert "proposer 'broken' (toydomain:missing_proposer) failed to load: AttributeError" in (
        broken.stderr
    )
    experiment = Path(whale_env["WHALE_HOME"]).parent / "broken.toml"
    experiment.write_text('name = "x"\n[search]\nproposer = "broken"\n')
    dry = whale("run", str(experiment), "--dry-run", env=env)
    assert dry.returncode == 2, dry.stderr
    assert "search.proposer: proposer 'broken' (toydomain:missing_proposer) failed" in dry.stderr
    unknown = whale("search", "--proposer", "gpt", env=env)
    assert unknown.returncode != 0 and "unknown proposer 'gpt'; known: " in unknown.stderr
    assert "style" in unknown.stderr  # the plugin's proposer is among the known ones
