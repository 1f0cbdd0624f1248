"""`whale train` as a user types it: test mean@k, online RFT steps under the harness, test
mean@k again, on the real model; the store then holds the run, its jobs and the checkpoint."""

import json
import sqlite3
import subprocess
from pathlib import Path

from safetensors.torch import load_file

from tests.conftest import WHALE

# Calls the model (its answers are what RFT trains on) but answers right by itself: every
# rollout is accepted, so the step trains whatever the model samples.
ORACLE = """
def run(task, llm, tools):
    expr = task["question"].removeprefix("What is ").rstrip("?")
    llm.chat([{"role": "user", "content": task["question"]}], max_tokens=8)
    return eval(expr)
"""


def test_whale_train_runs_a_weight_phase_and_reports_it(whale_env, tmp_path):
    harness = tmp_path / "oracle.py"
    harness.write_text(ORACLE)
    args = [
        "train",
        str(harness),
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
    assert out["before"] == out["after"] == 1.0  # the harness answers by itself
    assert out["rollouts_used"] == 4 * 2  # prompts x n, the test rollouts not counted
    [step] = out["steps"]
    # every rollout accepted, so the step trained
    assert (step["rollouts"], step["accepted"], step["status"]) == (8, 8, "done")
    assert step["loss"] > 0
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
        # the step went from the base checkpoint to a new one, its LoRA adapter
        (base_id,) = db.execute("SELECT id FROM checkpoint WHERE kind = 'base'").fetchone()
        job = db.execute(
            "SELECT checkpoint_in_id, checkpoint_out_id FROM training_job WHERE run_id = ?",
            (out["run_id"],),
        ).fetchone()
        assert job == (base_id, out["checkpoint_id"]) and out["checkpoint_id"] != base_id
        kind, parent, path = db.execute(
            "SELECT kind, parent_id, path FROM checkpoint WHERE id = ?", (out["checkpoint_id"],)
        ).fetchone()
    assert (kind, parent) == ("lora", base_id)
    # and its weights differ from the base: the adapter adds B @ A to a weight of the base,
    # zero before training (B starts at zero), not after
    adapter = load_file(Path(path) / "adapter" / "adapter_model.safetensors")
    pairs = [(adapter[a], adapter[a.replace("lora_A", "lora_B")]) for a in adapter if "lora_A" in a]
    assert pairs and any((b @ a).abs().max() > 0 for a, b in pairs)


def test_whale_train_names_a_bad_domain(whale_env):
    proc = subprocess.run(
        [WHALE, "train", "--domain", "chess960"],
        env=whale_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "unknown domain 'chess960'" in proc.stderr
