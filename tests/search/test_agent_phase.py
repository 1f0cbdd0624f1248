"""The agent proposer with a scripted command standing in for the coding agent."""

import json
import subprocess
import sys
from pathlib import Path

from app.config import SearchConfig
from app.search.agent import LOG_CAP

FAKE_AGENT = Path(__file__).with_name("fake_agent.py")


def test_the_agent_reads_the_workspace_and_its_candidates_are_collected(
    search, tmp_path, monkeypatch
):
    monkeypatch.setenv("STORE_PATH", str(tmp_path / "home" / "whale.db"))
    cfg = SearchConfig(
        proposer="agent",
        iterations=2,
        candidates=3,
        tasks=4,
        max_code_bytes=20_000,
        proposer_timeout_s=20,
        agent={
            "command": [sys.executable, str(FAKE_AGENT), "{workspace}", "{k}", "{iteration}"],
            "env": ["STORE_PATH"],
        },
    )
    phase, stored, settings = search(cfg)
    first, second = stored["iterations"][1:]

    seen = json.loads(first.report.splitlines()[0].removeprefix("saw "))
    assert seen["skill_asks_for_k"] and seen["summary_rows"] == 1
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
    assert subprocess.run(["pgrep", "-f", str(FAKE_AGENT)]).returncode == 1, "agent left running"
    workspace = settings.archive_dir / "runs" / str(phase.run_id)
    assert (workspace / f"agent-logs/iteration-{phase.id}-1.log").stat().st_size == LOG_CAP
    assert phase.ended_reason == "fixed" and phase.harness_out_id in (program.id, 1)


def test_a_missing_agent_command_fails_its_iteration_with_a_clear_error(search):
    cfg = SearchConfig(
        proposer="agent",
        iterations=1,
        tasks=2,
        agent={"command": ["/nonexistent/agent-cli", "{workspace}"]},
    )
    phase, stored, _ = search(cfg)
    failed = stored["iterations"][1]
    assert failed.status == "failed"
    assert failed.error == "FileNotFoundError: agent command not found: /nonexistent/agent-cli"
    assert phase.status == "done" and len(stored["rollouts"]) == 2
