"""kill -9 of the server in the middle of a harness phase and of a weight phase, then `whale
serve` again: the run resumes where it was and ends as if nothing happened - no phase twice, no
recorded rollout lost or counted twice, the interrupted training retried. SIGTERM to `whale run`:
it stops within its grace period and the run resumes."""

import json
import os
import signal
import sqlite3
import subprocess
import time

import httpx
import pytest

from app.interrupts import GRACE_S, TERMINATED
from app.llm.local import free_port
from app.loop.driver import DRIVER_EVENTS
from tests.conftest import AUTH, WEB_TOKEN, WHALE, csrf_headers, whale
from tests.loop.conftest import logged, quick_toml, store_invariants
from tests.search.conftest import seed_with


def serve(env) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [WHALE, "serve", "--port", str(port)],
        env={**env, "WHALE_TOKEN": WEB_TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(url + "/api/runs", headers=AUTH, timeout=2)
            return proc, url
        except httpx.HTTPError:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.2)
    raise AssertionError("whale serve did not answer")


def wait_for(db, sql: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists():  # connecting would create it
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


# Mid harness phase: some of its rollouts done and more pending than can finish before the kill
# lands (the first server runs IN_FLIGHT at a time, so at least one pending rollout has not
# started; with every rollout in flight, the writer could commit the last ones in between).
IN_FLIGHT = 2
MID_HARNESS = f"""SELECT count(*) FROM phase p WHERE p.kind = 'harness' AND p.status = 'running'
    AND EXISTS (SELECT 1 FROM rollout r JOIN evaluation e ON e.id = r.evaluation_id
                WHERE e.phase_id = p.id AND r.status != 'pending')
    AND (SELECT count(*) FROM rollout r JOIN evaluation e ON e.id = r.evaluation_id
         WHERE e.phase_id = p.id AND r.status = 'pending') > {IN_FLIGHT}"""
MID_TRAINING = "SELECT count(*) FROM training_job WHERE status = 'training'"


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["harness", "weight"])
def test_kill_9_and_resume(moment, tmp_path, whale_env):
    db = tmp_path / "home" / "whale.db"
    # Start from the seed with the program solver and worked examples: most rollouts pass, so
    # every weight step trains (and there is a training to interrupt).
    # (over HTTP a harness comes as code, not as a path on the server)
    harness = json.dumps(seed_with(SOLVER="program", EXAMPLES=3))
    # Each run holds just the phase it is killed in, and what fits after it: a harness phase
    # of harness_only (no training), or the first weight step of whale (16 of 30 rollouts).
    strategy, rollouts = ("harness_only", 40) if moment == "harness" else ("whale", 30)
    text = quick_toml(
        "crash", strategy, rollouts, rft={"samples_per_prompt": 4}, search={"tasks": 6}
    )
    text = text.replace('domain = "arith"', f'domain = "arith"\nharness_code = {harness}')
    limited = {**whale_env, "WHALE_CONCURRENCY": str(IN_FLIGHT)}
    proc, url = serve(limited if moment == "harness" else whale_env)
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
        subprocess.run(
            ["pgrep", "-f", f"app.training (--serve )?{tmp_path}"], capture_output=True
        ).returncode
        == 0
    ):
        assert time.monotonic() < deadline, "the training process outlived the killed server"
        time.sleep(0.2)

    # every invariant holds on the crashed store: what was in flight is pending in a running
    # evaluation of a running run
    checked = whale("check", str(run_id), env=whale_env, timeout=60)
    assert checked.returncode == 0, checked.stdout

    # the experiment cannot be changed under the unfinished run
    changed = tmp_path / "changed.toml"
    changed.write_text(text.replace(f"rollouts = {rollouts}", "rollouts = 60"))
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
        # a generous timeout: the machine is busy (speed is the benchmarks' business)
        run = httpx.get(f"{url}/api/runs/{run_id}", headers=AUTH, timeout=30).json()["run"]
        events = httpx.get(f"{url}/api/runs/{run_id}/events", headers=AUTH, timeout=30).json()
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
    # each server's loop process said what the run waited on while its model loaded: when the
    # run was posted, and when the restarted server took it up again
    loading = con.execute(
        "SELECT kind FROM event WHERE kind IN ('model_loading', 'model_ready') ORDER BY id"
    ).fetchall()
    assert loading == [("model_loading",), ("model_ready",)] * 2
    # the log opens with the model loading for the posted run, then its start; it ends with
    # its end
    assert [e["kind"] for e in events][:3] == ["model_loading", "model_ready", "run_start"]
    assert events[-1]["kind"] == "run_end"
    # the log tells the story: the kill -9 left no word, the next server says so on resuming
    drivers = [e for e in events if e["kind"] in DRIVER_EVENTS]
    assert [e["kind"] for e in drivers] == ["run_start", "run_resumed"], drivers
    assert "did not record (kill -9" in drivers[1]["detail"]["after"]
    assert drivers[1]["detail"]["pending_rollouts"] > 0 or moment == "weight"


@pytest.mark.slow
def test_sigterm_ends_whale_run_within_its_grace_and_the_run_resumes(tmp_path, whale_env):
    """What systemd and `docker stop` send: `whale run` stops within its grace period, leaves
    the rollouts it did not finish pending (whale check: every invariant holds), and the same
    command resumes the run to its end."""
    db = tmp_path / "home" / "whale.db"
    path = tmp_path / "term.toml"
    path.write_text(quick_toml("term", "harness_only", rollouts=14, search={"tasks": 4}))
    proc = subprocess.Popen(
        [WHALE, "run", str(path)], env=whale_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_for(db, "SELECT count(*) > 0 FROM rollout WHERE status != 'pending'")
        wait_for(db, "SELECT count(*) > 0 FROM rollout WHERE status = 'pending'")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(GRACE_S + 15)
    finally:
        proc.kill()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert code == TERMINATED, stderr[-2000:]
    assert "SIGTERM: stopping" in stderr and "resumes the run" in stderr
    (status,) = sqlite3.connect(db).execute("SELECT status FROM run").fetchone()
    assert status == "running"  # unfinished, to be resumed; not marked failed or stopped
    checked = whale("check", "1", env=whale_env, timeout=60)
    assert checked.returncode == 0, checked.stdout

    again = whale("run", str(path), "--json", env=whale_env)
    assert again.returncode == 0 and "resuming run 1" in again.stderr, again.stderr[-2000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["status"] == "done"
    store_invariants(db)
    # the log tells the story: stopped by SIGTERM, then resumed after it with what was pending
    drivers = logged(db, *DRIVER_EVENTS)
    assert [e.kind for e in drivers] == ["run_start", "run_interrupted", "run_resumed"], drivers
    assert drivers[1].detail["why"] == "SIGTERM" and drivers[2].detail["after"] == "SIGTERM"
    assert drivers[2].detail["pending_rollouts"] > 0
