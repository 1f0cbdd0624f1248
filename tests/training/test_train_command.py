"""`whale train` as a user types it: test mean@k, online RFT steps under the harness, test
mean@k again, on the real model; the store then holds the run, its jobs and the checkpoint."""

import json
import sqlite3
import subprocess

from tests.conftest import WHALE


def test_whale_train_runs_a_weight_phase_and_reports_it(whale_env, tmp_path):
    args = [
        "train",
        "--domain",
        "arith",
        "--steps",
        "1",
        "--prompts",
        "4",
        "-n",
        "2",
        "--lora-rank",
        "4",
        "--test-k",
        "1",
        "--test-limit",
        "4",
        "--json",
    ]
    proc = subprocess.run(
        [WHALE, *args],
        env={**whale_env, "WHALE_SANDBOX": "process"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["k"] == 1 and out["n_test_tasks"] == 4
    assert 0 <= out["before"] <= 1 and 0 <= out["after"] <= 1
    assert out["rollouts_used"] == 4 * 2  # prompts x n, the test rollouts not counted
    [step] = out["steps"]
    assert step["rollouts"] == 8 and step["status"] in ("done", "skipped")
    with sqlite3.connect(tmp_path / "home" / "whale.db") as db:
        assert db.execute(
            "SELECT kind, status FROM run WHERE id = ?", (out["run_id"],)
        ).fetchone() == ("rft", "done")
        jobs = db.execute("SELECT count(*) FROM training_job WHERE run_id = ?", (out["run_id"],))
        assert jobs.fetchone()[0] == 1
        # the same weight phase the loop runs: one phase row, closed after its one step
        phase = db.execute(
            "SELECT kind, status, ended_reason, rollouts FROM phase WHERE run_id = ?",
            (out["run_id"],),
        ).fetchall()
        assert phase == [("weight", "done", "fixed", 8)]
        # and the run's curve: a test point before (0 steps) and after (1 step, 8 rollouts)
        points = db.execute(
            "SELECT weight_steps, rollouts, y FROM metric WHERE run_id = ? AND "
            "series = 'test/mean@k' ORDER BY id",
            (out["run_id"],),
        ).fetchall()
        assert points == [(0, 0, out["before"]), (1, 8, out["after"])]
        kind = db.execute("SELECT kind FROM checkpoint WHERE id = ?", (out["checkpoint_id"],))
        # a step that accepted nothing trains nothing: the checkpoint stays the base
        assert kind.fetchone()[0] == ("lora" if step["status"] == "done" else "base")


def test_whale_train_names_a_bad_domain(whale_env):
    proc = subprocess.run(
        [WHALE, "train", "--domain", "chess960"],
        env=whale_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "unknown domain 'chess960'" in proc.stderr
