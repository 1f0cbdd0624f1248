"""Without bubblewrap the process backend is rlimits only: a harness then runs as the
workbench's own user. As root that would be root on the host, so the workbench refuses, in one
line that says what to do, before any rollout starts."""

import os
import sqlite3
from pathlib import Path

import pytest

from sandbox.pool import SandboxUnavailable
from sandbox.process import ROOT_WITHOUT_BWRAP, ProcessLauncher
from tests.conftest import MISSING, REPO, whale

# Root is what this refusal is about: where every component is required (CI, as root), a run
# that is not root fails here instead of skipping quietly.
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason=MISSING + "root (the refusal is for root only)"
)


def test_the_process_launcher_refuses_root_without_bubblewrap(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap to be found
    with pytest.raises(SandboxUnavailable, match="runs as root"):
        ProcessLauncher()
    assert ProcessLauncher(root_without_bwrap=True).bwrap is False  # the suite's own opt-in


def test_whale_eval_as_root_without_bubblewrap_is_refused_in_one_line(tmp_path, whale_env):
    no_bwrap = tmp_path / "bin"
    no_bwrap.mkdir()
    env = {**whale_env, "PATH": str(no_bwrap), "WHALE_SANDBOX": "process"}
    seed = REPO / "harness_archive/seeds/arith/seed.py"
    proc = whale("eval", str(seed), "--limit", "1", env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert ROOT_WITHOUT_BWRAP in proc.stderr.replace("\n", " ")
    assert "Traceback" not in proc.stderr
    db = Path(whale_env["WHALE_HOME"]) / "whale.db"
    if db.exists():  # the store may be opened before the sandbox is chosen: nothing ran
        assert sqlite3.connect(db).execute("SELECT count(*) FROM rollout").fetchone()[0] == 0
