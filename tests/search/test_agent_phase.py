"""The agent proposer with a scripted command standing in for the coding agent."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from app.experiment_schema import SearchConfig
from app.search.agent import LOG_CAP
from app.search.agent_presets import PRESETS
from sandbox.agent_sandbox import sandbox_python

FAKE_AGENT = Path(__file__).with_name("fake_agent.py")
# one worker under xdist: a test here checks that no fake agent is left running, anywhere
pytestmark = pytest.mark.xdist_group("agent")


def test_the_agent_reads_the_workspace_and_its_candidates_are_collected(
    search, tmp_path, monkeypatch
):
    monkeypatch.setenv("STORE_PATH", str(tmp_path / "home" / "whale.db"))
    # the agent's sandbox shows its program's folder, not the host's /work or /tmp
    agent = tmp_path / "agent-bin" / "fake_agent.py"
    agent.parent.mkdir()
    shutil.copy(FAKE_AGENT, agent)
    cfg = SearchConfig(
        proposer="agent",
        candidates=3,
        tasks=4,
        max_code_bytes=20_000,
        proposer_timeout_s=20,
        agent={
            "command": [sandbox_python(), str(agent), "{workspace}", "{k}", "{iteration}"],
            "read_paths": [str(agent.parent)],
            "env": ["STORE_PATH"],
        },
    )
    phase, stored, settings = search(cfg, iterations=2)
    first, second = stored["iterations"][1:]

    seen = json.loads(first.report.splitlines()[0].removeprefix("saw "))
    assert seen["skill_asks_for_k"] and seen["summary_rows"] == 1
    assert seen["skill_guides_the_domain"]  # app/domains/skills/arith.md
    assert seen["trace_records"] == 4 and seen["model_steps"] == 4  # iteration 0's rollouts
    assert seen["test_task_ids"] == 0, "the test split must never reach the workspace"
    assert seen["store_visible"] is False, "bubblewrap hides the store from the agent"
    assert "ignored files outside candidates/: stray.py" in first.report

    by_name = {h.name: h for h in stored["harnesses"] if h.iteration == 1}
    assert set(by_name) == {"big", "link", "program"}
    assert by_name["big"].error.startswith("too large")
    assert by_name["link"].error == "not a regular file (symlinks are refused)"
    program = by_name["program"]
    assert program.valid and program.axis == "solver" and program.parent_ids == [1]
    assert (first.prompt_tokens, first.completion_tokens, first.n_valid) == (1234, 56, 1)

    assert second.status == "failed" and "did not finish within 20 s" in second.error
    assert subprocess.run(["pgrep", "-f", str(agent)]).returncode == 1, "agent left running"
    workspace = settings.archive_dir / "runs" / str(phase.run_id)
    assert (workspace / f"agent-logs/iteration-{phase.id}-1.log").stat().st_size == LOG_CAP
    assert phase.ended_reason == "fixed" and phase.harness_out_id in (program.id, 1)


def test_a_missing_agent_command_fails_its_iteration_with_a_clear_error(search):
    cfg = SearchConfig(
        proposer="agent",
        tasks=2,
        agent={"command": ["/nonexistent/agent-cli", "{workspace}"]},
    )
    phase, stored, _ = search(cfg, iterations=1)
    failed = stored["iterations"][1]
    assert failed.status == "failed"
    assert failed.error == "FileNotFoundError: agent command not found: /nonexistent/agent-cli"
    assert phase.status == "done" and len(stored["rollouts"]) == 2


FAKE_CLI = Path(__file__).with_name("fake_agent_cli.py")


@pytest.fixture
def agent_clis(tmp_path, monkeypatch):
    """`claude` and `codex` on the PATH, both the stand-in; the API keys the presets pass."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("claude", "codex"):
        # a Python the agent's sandbox shows (the workbench's own lives outside it)
        (bin_dir / name).write_text(f"#!{sandbox_python()}\n" + FAKE_CLI.read_text())
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("WHALE_TEST_SECRET", "not for the agent")
    return bin_dir


@pytest.mark.parametrize("preset", ["claude-code", "codex"])
def test_a_preset_runs_its_agent_and_reads_its_output(preset, agent_clis, search):
    cfg = SearchConfig(proposer="agent", candidates=2, tasks=2, agent={"preset": preset})
    phase, stored, settings = search(cfg, iterations=2)
    first, second = stored["iterations"][1:]
    workspace = settings.archive_dir / "runs" / str(phase.run_id)
    cli = "claude" if preset == "claude-code" else "codex"
    seen = json.loads((workspace / f"seen-{cli}-1.json").read_text())
    expected = PRESETS[preset].argv("bwrap")
    assert seen["argv"] == [a.format(workspace=workspace, k=2, iteration=1) for a in expected[1:]]
    # the host's other variables stay out; its home is the workspace's
    assert "WHALE_TEST_SECRET" not in seen["env"] and seen["home"] == str(workspace / ".home")
    assert set(seen["env"]) <= {
        "PATH",
        "HOME",
        "LANG",
        "TMPDIR",
        *PRESETS[preset].env,
        *PRESETS[preset].setenv,
        *(f"{proxy}_PROXY" for proxy in ("HTTPS", "HTTP", "ALL")),
        *(f"{proxy}_proxy" for proxy in ("https", "http", "all")),
        "PWD",
        "SHLVL",
        "_",
    }

    program = next(h for h in stored["harnesses"] if h.name == "program")
    assert program.valid and program.iteration == 1
    if preset == "claude-code":
        assert (first.prompt_tokens, first.completion_tokens, first.cost_usd) == (
            12120,
            850,
            0.0421,
        )
        assert second.status == "failed"
        assert second.error == "claude-code: error_max_budget_usd: Reached maximum budget ($0.50)"
    else:
        assert (first.prompt_tokens, first.completion_tokens, first.cost_usd) == (10000, 500, None)
        assert second.status == "failed"
        assert second.error == "codex: unexpected status 401 Unauthorized: Missing bearer"
    assert first.status == "done"


def test_a_preset_whose_cli_is_missing_says_which(search, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    cfg = SearchConfig(proposer="agent", tasks=2, agent={"preset": "codex"})
    _, stored, _ = search(cfg, iterations=1)
    failed = stored["iterations"][1]
    assert failed.status == "failed" and "agent command not found: codex" in failed.error
    assert "the codex preset runs it" in failed.error


def test_a_preset_and_a_command_are_not_both_given():
    with pytest.raises(ValueError, match="a preset or a command, not both"):
        SearchConfig(proposer="agent", agent={"preset": "codex", "command": ["x"]})
