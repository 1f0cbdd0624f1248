"""SIGKILL of the local model server while a loop's evaluation, or an RFT step's sampling, has
a model call in flight: the workbench restarts it, the rollouts whose calls failed are tried
again once it is back (or recorded `infra`), the phase and the run end, and the run's log
names the crash."""

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from app.read.dashboard import MODEL_SERVER_EVENTS
from tests.conftest import WHALE
from tests.loop.conftest import logged, quick_toml, store_invariants
from tests.loop.test_crash import wait_for


def children(pid: int) -> list[int]:
    """The processes `pid` started (any of its threads)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def model_server_of(pid: int, timeout: float = 300) -> tuple[int, int]:
    """(pid, port) of the local model server that process `pid` launched, once it serves."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in children(pid):
            try:
                cmd = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            if b"app.llm.local_server" in cmd:
                return child, int(cmd[cmd.index(b"--port") + 1])
        time.sleep(0.2)
    raise AssertionError("no local model server was started")


def requests_in_flight(port: int) -> int:
    """Requests the server is decoding or holding in its queue (its /metrics)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("whale:num_requests_running", "whale:num_requests_waiting"))
    )


# When the kill comes: a rollout of this split is pending (test: the test point at the start;
# train: an RFT step's sampling, before its checkpoint is trained).
PENDING_IN = """SELECT count(*) > 0 FROM rollout r JOIN evaluation e ON e.id = r.evaluation_id
    WHERE r.status = 'pending' AND e.split = '{split}'"""


@pytest.mark.parametrize(
    "strategy, split",
    [("harness_only", "test"), ("weight_only", "train")],
    ids=["mid-evaluation", "mid-rft-sampling"],
)
def test_a_killed_local_model_server_is_restarted_and_the_run_ends(
    tmp_path, whale_env, strategy, split
):
    db = tmp_path / "home" / "whale.db"
    env = {k: v for k, v in whale_env.items() if k not in ("WHALE_LLM_URL", "WHALE_LLM_MODEL")}
    path = tmp_path / "killed.toml"
    # weight_only: one RFT step of 4 prompts x 2 samples
    path.write_text(quick_toml("killed", strategy, rollouts=8, search={"tasks": 4}))
    proc = subprocess.Popen(
        [WHALE, "run", str(path)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        server, port = model_server_of(proc.pid)
        wait_for(db, PENDING_IN.format(split=split))
        deadline = time.monotonic() + 120
        while requests_in_flight(port) == 0:  # a rollout's model call is being answered
            assert time.monotonic() < deadline, "no model call reached the server"
            time.sleep(0.05)
        os.kill(server, signal.SIGKILL)
        code = proc.wait(300)
    finally:
        proc.kill()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert code == 0, stderr[-3000:]
    assert "the local model server was killed by SIGKILL; restarting it" in stderr

    store_invariants(db)  # nothing pending, every evaluation and phase done, records whole
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM run").fetchone() == ("done",)
    tried = con.execute(
        """SELECT r.status, r.reason, r.error, e.split FROM rollout r
        JOIN evaluation e ON e.id = r.evaluation_id WHERE r.attempts > 1"""
    ).fetchall()
    assert split in {t[3] for t in tried}, f"no rollout of the {split} split was hit: {tried}"
    for status, reason, error, _ in tried:
        if status == "infra":  # its every try failed: the cause is on the row
            assert reason == "infrastructure" and "model backend failed" in error
        else:  # tried again once the server was back, and scored
            assert status in ("pass", "fail", "error", "timeout"), (status, reason, error)
    con.close()
    events = {e.kind: e.detail for e in logged(db, *MODEL_SERVER_EVENTS)}
    assert set(events) == {"model_server_exited", "model_server_restarted"}, events
    # and the calls it failed: told once when they began to fail, once when answered again
    calls = logged(db, "model_calls_failing", "model_calls_back")
    assert [e.kind for e in calls] == ["model_calls_failing", "model_calls_back"], calls
    assert "model backend error" in calls[0].detail["why"]
    assert "killed by SIGKILL" in events["model_server_exited"]["why"]
    assert events["model_server_exited"]["pid"] == server
    assert events["model_server_restarted"]["pid"] != server
