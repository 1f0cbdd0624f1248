"""One RFT step end to end: sample in the sandbox, accept, train, register, serve the new weights."""

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest
from sqlmodel import select

from app.db.schema import Checkpoint, Evaluation, Event, Metric, Rollout, Step, TrainingJob
from app.domains import get_domain
from app.experiment_schema import RFTConfig
from app.runs import open_run, read_harness
from app.training.job import TrainingError
from app.training.rft import TRAINING_TRIES, prompt_batch, rft_step
from tests.conftest import attached_settings, started_workbench

# Calls the model (so there are model steps to learn from) but answers right by itself, so
# every rollout is accepted: the test is about the plumbing, not about the model's skill.
ORACLE = """
def run(task, llm, tools):
    expr = task["question"].removeprefix("What is ").rstrip("?")
    llm.chat([{"role": "user", "content": task["question"]}], max_tokens=8, temperature=0.0)
    return eval(expr)
"""
TWO_CALLS = """
def run(task, llm, tools):
    expr = task["question"].removeprefix("What is ").rstrip("?")
    for _ in range(2):
        llm.chat([{"role": "user", "content": task["question"]}], max_tokens=8, temperature=0.0)
    return eval(expr)
"""
NEVER = (
    "def run(task, llm, tools):\n    llm.chat([{'role': 'user', 'content': 'hi'}], max_tokens=2)\n"
)


def kill_training(where, times: int, once: Path | None = None) -> list[int]:
    """SIGKILL the first `times` training processes whose folder lies under `where` (the test's
    folder) as they appear (an OOM kill, seen from the workbench), or only once the file `once`
    exists (a job's spec: that job is training); returns their pids as it goes."""
    killed: list[int] = []

    def watch():
        deadline = time.monotonic() + 600
        while len(killed) < times and time.monotonic() < deadline:
            if once is not None and not once.exists():
                time.sleep(0.1)
                continue
            found = subprocess.run(
                ["pgrep", "-f", f"app.training (--serve )?{where}"], capture_output=True, text=True
            ).stdout.split()
            for pid in map(int, found):
                if pid not in killed:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()
    return killed


def run_step(tmp_path, model_server, model_cache, code: str, cfg: RFTConfig):
    harness_path = tmp_path / "harness.py"
    harness_path.write_text(textwrap.dedent(code))
    settings = attached_settings(tmp_path / "home", model_server, model_cache)

    async def main():
        async with started_workbench(settings) as workbench:
            made = await open_run(
                workbench,
                "rft",
                "rft",
                "arith",
                read_harness(harness_path),
                {"rft": cfg.model_dump()},
            )
            run, harness, base = made.run, made.harness, made.checkpoint
            job, checkpoint = await rft_step(
                workbench, run.id, harness, base, get_domain("arith"), cfg, step=0
            )
            reply = None
            if checkpoint.id != base.id:  # the new weights answer under their served name
                reply = await workbench.endpoint.chat(
                    checkpoint.name,
                    [{"role": "user", "content": "What is 12 + 30?"}],
                    max_tokens=12,
                    seed=3,
                )
            with workbench.session() as s:
                stored = {
                    "jobs": s.exec(select(TrainingJob)).all(),
                    "checkpoints": s.exec(select(Checkpoint).order_by(Checkpoint.id)).all(),
                    "metrics": s.exec(select(Metric)).all(),
                    "rollouts": s.exec(select(Rollout)).all(),
                    "evaluations": s.exec(select(Evaluation)).all(),
                    "steps": s.exec(select(Step)).all(),
                    "events": s.exec(select(Event)).all(),
                }
            return job, base, checkpoint, reply, stored

    return asyncio.run(main())


def test_accepted_rollouts_train_a_registered_servable_checkpoint_past_a_killed_trainer(
    tmp_path, model_server, model_cache
):
    cfg = RFTConfig(prompts_per_step=3, samples_per_prompt=2, lora_rank=4, lr=1e-3, batch_size=4)
    killed = kill_training(tmp_path, times=1)  # the first training process dies: tried again
    job, base, checkpoint, reply, stored = run_step(
        tmp_path, model_server, model_cache, ORACLE, cfg
    )
    assert len(killed) == 1
    (retry,) = [e for e in stored["events"] if e.kind == "training_retry"]
    assert retry.detail["job_id"] == job.id and "exited with code -9" in retry.detail["error"]
    assert (job.status, job.n_rollouts, job.n_accepted) == ("done", 6, 6)
    assert job.n_examples == 6 and job.tokens_trained > 0 and job.loss > 0
    # an endpoint attached by URL is not asked for token ids: every example was rendered, and
    # the job says so (tests/gateway and tests/llm/test_vllm.py train on sampled ids)
    assert (job.n_from_ids, job.n_rendered, job.n_drift_checked) == (0, 6, 0)
    # max_seq_len defaults to the rollout token budget: no call of a rollout is longer
    assert (job.max_seq_len, job.n_truncated, job.n_dropped) == (16384, 0, 0)
    assert job.mean_reward == 1.0
    # the sampling went through the ordinary rollout path: traces recorded on the train split
    assert len(stored["rollouts"]) == 6 and all(r.turns == 1 for r in stored["rollouts"])
    # the harness asks for greedy decoding; RFT samples at [rft] temperature all the same
    (sampling,) = stored["evaluations"]
    assert sampling.split == "train" and sampling.generation["forced"] == {"temperature": 1.0}
    assert [st.request["temperature"] for st in stored["steps"]] == [1.0] * 6
    assert (checkpoint.kind, checkpoint.parent_id, checkpoint.training_job_id) == (
        "lora",
        base.id,
        job.id,
    )
    assert checkpoint.size_bytes > 1_000_000
    assert job.checkpoint_out_id == checkpoint.id
    assert {m.series for m in stored["metrics"]} == {
        "train/accept_rate",
        "train/mean_reward",
        "train/loss",
    }
    assert reply["choices"][0]["message"]["content"]


def test_a_rollout_mini_batch_holds_every_call_of_its_rollouts(tmp_path, model_server, model_cache):
    """batch_unit "rollout": 6 accepted rollouts of 2 calls at batch_size 2 are 3 optimizer
    steps of 4 calls (by calls they would be 6 steps of 2), with AdamW's weight decay set."""
    cfg = RFTConfig(
        prompts_per_step=3, samples_per_prompt=2, lora_rank=4, batch_size=2, batch_unit="rollout"
    )
    job, _, _, _, stored = run_step(tmp_path, model_server, model_cache, TWO_CALLS, cfg)
    assert (job.status, job.n_accepted, job.n_examples) == ("done", 6, 12)
    losses = [m for m in stored["metrics"] if m.series == "train/loss"]
    assert sorted(m.x for m in losses) == [1 / 3, 2 / 3, 1.0]
    spec = json.loads((tmp_path / "home" / "training" / f"job-{job.id}" / "spec.json").read_text())
    assert (spec["batch_unit"], spec["batch_size"], spec["weight_decay"]) == ("rollout", 2, 0.01)
    rollouts = [json.loads(line)["rollout_id"] for line in open(spec["examples"])]
    assert sorted(rollouts) == sorted(r.id for r in stored["rollouts"] for _ in range(2))


def test_a_full_fine_tune_step_trains_every_weight_and_the_new_weights_answer(
    tmp_path, model_server, model_cache
):
    """lora = false, the paper's setting: all parameters train, the checkpoint is whole weights
    only, and the server answers under them (the local backend loads the folder by path)."""
    from pathlib import Path

    from safetensors.torch import load_file

    from app.llm.local import prepare_model

    cfg = RFTConfig(
        prompts_per_step=2, samples_per_prompt=2, lora=False, lr=1e-5, optimizer_state="step"
    )
    job, base, checkpoint, reply, _ = run_step(tmp_path, model_server, model_cache, ORACLE, cfg)
    assert (job.status, checkpoint.kind, checkpoint.parent_id) == ("done", "full", base.id)
    folder = Path(checkpoint.path)
    assert not (folder / "adapter").exists() and not (folder / "optimizer.pt").exists()
    before = load_file(prepare_model(model_cache) / "model.safetensors")
    after = load_file(folder / "merged" / "model.safetensors")
    assert set(after) == set(before)
    unchanged = [name for name in before if before[name].equal(after[name])]
    assert unchanged == [], f"weights a full fine-tune left untouched: {unchanged[:5]}"
    assert reply["model"] == checkpoint.name and reply["choices"][0]["message"]["content"]


def test_a_training_process_that_dies_every_time_fails_the_job_with_its_log(
    tmp_path, model_server, model_cache
):
    cfg = RFTConfig(prompts_per_step=2, samples_per_prompt=1, lora_rank=4)
    killed = kill_training(tmp_path, times=TRAINING_TRIES)
    with pytest.raises(TrainingError, match="exited with code -9"):
        run_step(tmp_path, model_server, model_cache, ORACLE, cfg)
    assert len(killed) == TRAINING_TRIES
    db = sqlite3.connect(tmp_path / "home" / "whale.db")
    status, error = db.execute("SELECT status, error FROM training_job").fetchone()
    assert status == "failed" and "exited with code -9" in error and "$ " in error  # the log
    assert db.execute("SELECT count(*) FROM event WHERE kind = 'training_retry'").fetchone() == (1,)
    # nothing half-written was registered as a checkpoint
    assert db.execute("SELECT count(*) FROM checkpoint WHERE kind != 'base'").fetchone() == (0,)


def test_nothing_accepted_skips_the_update(tmp_path, model_server, model_cache):
    cfg = RFTConfig(prompts_per_step=2, samples_per_prompt=2)
    job, base, checkpoint, _, stored = run_step(tmp_path, model_server, model_cache, NEVER, cfg)
    assert (job.status, job.n_accepted, job.n_rollouts) == ("skipped", 0, 4)
    assert checkpoint.id == base.id
    assert len(stored["checkpoints"]) == 1


def test_train_prompts_are_shuffled_per_epoch_by_the_seed_each_once_per_epoch():
    domain = get_domain("arith")
    n = len(domain.tasks("train"))
    cfg = RFTConfig(prompts_per_step=7, seed=3)
    steps = -(-2 * n // 7)  # two epochs and a bit
    drawn = [t.id for step in range(steps) for t in prompt_batch(domain, cfg, step)]
    first, second = drawn[:n], drawn[n : 2 * n]
    assert sorted(first) == sorted(second) == sorted(t.id for t in domain.tasks("train"))
    assert first != [t.id for t in domain.tasks("train")]  # not the file's order
    assert first != second  # a new order each epoch
    assert drawn == [t.id for s in range(steps) for t in prompt_batch(domain, cfg, s)]  # resumable
    other = [t.id for t in prompt_batch(domain, cfg.model_copy(update={"seed": 4}), 0)]
    assert other != drawn[:7]


def test_a_step_continues_the_optimizer_its_phase_or_run_saved_and_no_other(store, tmp_path):
    from app.db import read_session
    from app.db.schema import Harness, Phase, Run
    from app.training.rft import _carried_optimizer

    engine, writer = store

    def rows(s):
        run = Run(name="r", kind="experiment", domain="arith")
        s.add(run)
        s.flush()
        harness = Harness(run_id=run.id, name="h.py", code="", sha="x")
        base = Checkpoint(name="base")
        one, two = (Phase(run_id=run.id, kind="weight", round=r) for r in (1, 2))
        s.add_all([harness, base, one, two])
        s.flush()
        job = dict(run_id=run.id, harness_id=harness.id, checkpoint_in_id=base.id)
        made = TrainingJob(**job, step=0, phase_id=one.id)
        s.add(made)
        s.flush()
        trained = Checkpoint(name="c1", kind="lora", path=str(tmp_path), training_job_id=made.id)
        s.add(trained)
        s.flush()
        same = TrainingJob(**job, step=1, phase_id=one.id)
        later = TrainingJob(**job, step=2, phase_id=two.id)
        s.add_all([same, later])
        return base, trained, same, later

    base, trained, same, later = writer.submit(rows).result()
    with read_session(engine) as s:
        # named whether or not written yet: the phase's trainer may still be writing it, and
        # holds it in memory; one started afresh without the file starts a new AdamW
        assert _carried_optimizer(s, trained, same, "phase") == tmp_path / "optimizer.pt"
        assert _carried_optimizer(s, trained, later, "phase") is None  # a new phase starts afresh
        assert _carried_optimizer(s, base, same, "phase") is None  # the base has no optimizer
        # "run": the next weight phase goes on with the optimizer its checkpoint was saved with
        assert _carried_optimizer(s, trained, later, "run") == tmp_path / "optimizer.pt"
        assert _carried_optimizer(s, base, later, "run") is None
        assert _carried_optimizer(s, trained, same, "step") is None
