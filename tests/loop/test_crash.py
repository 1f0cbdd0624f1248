"""kill -9 of the server in the middle of a harness phase and of a weight phase, then `whale
serve` again: the run resumes where it was and ends as if nothing happened - no phase twice, no
recorded rollout lost or counted twice, the interrupted training retried."""

import json
import os
import signal
import sqlite3
import subprocess
import time

import httpx
import pytest

from app.llm.local import free_port
from tests.conftest import WHALE, csrf_headers, whale
from tests.loop.conftest import quick_toml, store_invariants
from tests.search.conftest import seed_with


def serve(env) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [WHALE, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(url + "/api/runs", timeout=2)
            return proc, url
        except httpx.HTTPError:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.2)
    raise AssertionError("whale serve did not answer")


def wait_for(db, sql: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        con = sqlite3.connect(db)
        try:
            if con.execute(sql).fetchone()[0]:
                return
        except sqlite3.OperationalError:
            pass  # the store is being created
        finally:
            con.close()
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for: {sql}")


MID_HARNESS = """SELECT count(*) FROM phase p WHERE p.kind = 'harness' AND p.status = 'running'
    AND EXISTS (SELECT 1 FROM rollout r JOIN evaluation e ON e.id = r.evaluation_id
                WHERE e.phase_id = p.id AND r.status != 'pending')
    AND EXISTS (SELECT 1 FROM rollout r JOIN evaluation e ON e.id = r.evaluation_id
                WHERE e.phase_id = p.id AND r.status = 'pending')"""
MID_TRAINING = "SELECT count(*) FROM training_job WHERE status = 'training'"


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["harness", "weight"])
def test_kill_9_and_resume(moment, tmp_path, whale_env):
    db = tmp_path / "home" / "whale.db"
    # Start from the seed with the program solver and worked examples: most rollouts pass, so
    # every weight step trains (and there is a training to interrupt).
    # (over HTTP a harness comes as code, not as a path on the server)
    harness = json.dumps(seed_with(SOLVER="program", EXAMPLES=3))
    text = quick_toml("crash", rollouts=50, rft={"samples_per_prompt": 4}, search={"tasks": 6})
    text = text.replace('domain = "arith"', f'domain = "arith"\nharness_code = {harness}')
    proc, url = serve(whale_env)
    try:
        response = httpx.post(
            url + "/api/runs", headers=csrf_headers(url), json={"experiment": text}, timeout=300
        )
        assert response.status_code == 201, response.text
        run_id = response.json()["run"]["id"]
        # a second server on the same store is refused
        second = whale("serve", "--port", str(free_port()), env=whale_env, timeout=60)
        assert second.returncode == 2 and "already running the loop" in second.stderr
        wait_for(db, MID_HARNESS if moment == "harness" else MID_TRAINING)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    con = sqlite3.connect(db)
    recorded = con.execute(
        "SELECT id, status, reward FROM rollout WHERE status != 'pending'"
    ).fetchall()
    phases_before = con.execute("SELECT id, kind, round, status FROM phase ORDER BY id").fetchall()
    con.close()
    assert phases_before[-1][1] == moment and phases_before[-1][3] == "running"
    # the training process dies with the server (its parent-death signal): wait for it, boundedly
    deadline = time.monotonic() + 30
    while (
        subprocess.run(["pgrep", "-f", f"app.training {tmp_path}"], capture_output=True).returncode
        == 0
    ):
        assert time.monotonic() < deadline, "the training process outlived the killed server"
        time.sleep(0.2)

    # the experiment cannot be changed under the unfinished run
    changed = tmp_path / "changed.toml"
    changed.write_text(text.replace("rollouts = 50", "rollouts = 60"))
    refused = whale("run", str(changed), env=whale_env, timeout=120)
    assert (
        refused.returncode == 2
        and "is unfinished and was started from a different" in refused.stderr
    )

    proc, url = serve(whale_env)
    try:
        wait_for(
            db,
            f"SELECT count(*) FROM run WHERE id = {run_id} AND status IN ('done', 'failed', 'stopped')",
        )
        run = httpx.get(f"{url}/api/runs/{run_id}").json()["run"]
        events = httpx.get(f"{url}/api/runs/{run_id}/events").json()
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()
    assert run["status"] == "done", events[-1]
    counts = store_invariants(db)
    con = sqlite3.connect(db)
    after = {r[0]: r for r in con.execute("SELECT id, status, reward FROM rollout")}
    assert all(after[r[0]] == r for r in recorded), "a recorded rollout changed or vanished"
    phases_after = con.execute("SELECT id, kind, round FROM phase ORDER BY id").fetchall()
    # the interrupted phase finished in place: same row, not a second one of its kind and round
    assert [p[:3] for p in phases_before] == phases_after[: len(phases_before)]
    if moment == "weight":
        jobs = con.execute("SELECT status, checkpoint_out_id FROM training_job").fetchall()
        assert all(status in ("done", "skipped") for status, _ in jobs)
    assert counts["rollout"] == con.execute("SELECT sum(n_tasks * k) FROM evaluation").fetchone()[0]
    assert [e["kind"] for e in events][:1] == ["run_start"] and events[-1]["kind"] == "run_end"
