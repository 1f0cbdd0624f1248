"""Checkpoint retention ([rft] keep_last, keep_every, max_disk_gb) and the RFT step's time split:
a weight phase on the real model keeps the weights the rules name and drops the others' folders,
their rows and pages staying; over the disk budget it drops more, oldest first, then pauses."""

import asyncio
import re
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from safetensors.numpy import save_file
from sqlmodel import select

from app import control
from app.cli.loop import print_summary, summary
from app.config import Settings
from app.db.schema import (
    Checkpoint,
    Evaluation,
    Event,
    Harness,
    Phase,
    Run,
    TrainingJob,
    now,
    sha_of,
)
from app.domains import get_domain
from app.experiment_schema import RFTConfig
from app.read.invariants import run_checks
from app.server import create_app
from app.training.job import OPTIMIZER_FILE
from app.training.retention import GB, DiskBudgetExceeded, disk_bytes, retain
from app.training.weight_phase import train_file
from app.workbench import Workbench
from tests.conftest import AUTH, WEB_TOKEN, attached_settings, started_workbench
from tests.training.test_rft import ORACLE

# in the order the job page shows them; "startup_s": the phase's training process starting and
# loading (its first step; later ones train on what it keeps)
TIMED_PARTS = ["sampling_s", "scoring_s", "startup_s", "training_s", "saving_s", "sync_s"]


def test_a_phase_keeps_the_last_and_every_second_step_and_says_which_weights_it_dropped(
    tmp_path, model_server, model_cache, capsys
):
    harness_path = tmp_path / "harness.py"
    harness_path.write_text(textwrap.dedent(ORACLE))
    settings = attached_settings(tmp_path / "home", model_server, model_cache)
    cfg = RFTConfig(
        prompts_per_step=2, samples_per_prompt=1, lora_rank=4, batch_size=2,
        keep_last=1, keep_every=2,
    )  # fmt: skip

    async def main():
        async with started_workbench(settings) as workbench:
            return await train_file(workbench, harness_path, get_domain("arith"), cfg, 3, 1, 2)

    run_id, result = asyncio.run(main())
    workbench = Workbench(Settings(home=settings.home), say=lambda _: None)
    with workbench.session() as s:
        trained = s.exec(
            select(Checkpoint, TrainingJob.step)
            .join(TrainingJob, TrainingJob.id == Checkpoint.training_job_id)
            .where(Checkpoint.run_id == run_id)
            .order_by(TrainingJob.step)
        ).all()
        jobs = s.exec(select(TrainingJob).where(TrainingJob.run_id == run_id)).all()
        checks = run_checks(s, run_id)
        cli = summary(s, run_id)
    assert [step for _, step in trained] == [0, 1, 2]  # every row stays
    (first, _), (second, _), (last, _) = trained
    # step 1 is the release's global step 2 (keep_every = 2), step 2 the last (keep_last = 1);
    # step 0 is neither and nothing refers to it
    assert first.weights_dropped_at is not None and not Path(first.path).exists()
    for kept in (second, last):
        assert kept.weights_dropped_at is None and (Path(kept.path) / "adapter").is_dir()
    # the optimizer state only where the next step would continue it
    assert not (Path(second.path) / OPTIMIZER_FILE).exists()
    assert (Path(last.path) / OPTIMIZER_FILE).is_file()
    folders = sorted(p.name for p in (settings.home / "checkpoints" / f"run-{run_id}").iterdir())
    assert folders == sorted(Path(c.path).name for c in (second, last))
    assert result.checkpoint.id == last.id
    assert [c.name for c in checks if not c.ok] == []

    # every step's time split, on its job, its page, its JSON and `whale run`'s summary
    for job in jobs:
        assert sorted(job.timings) == sorted(TIMED_PARTS), job.timings
        assert job.timings["sampling_s"] > 0 and job.timings["training_s"] > 0
    print_summary(cli)
    printed = capsys.readouterr().out
    assert "RFT steps: seconds per part" in printed and "weight sync" in printed
    assert [j["sampling_s"] for j in cli["rft_steps"]] == [j.timings["sampling_s"] for j in jobs]

    client = TestClient(
        create_app(workbench, token=WEB_TOKEN), base_url="http://localhost", headers=AUTH
    )
    data = client.get(f"/api/training/{jobs[0].id}").json()
    assert [p["key"] for p in data["time_split"]] == TIMED_PARTS
    page = client.get(f"/training/{jobs[0].id}")
    assert page.status_code == 200 and 'id="time-split"' in page.text and "weight sync" in page.text

    dropped = client.get(f"/api/checkpoints/{first.id}").json()
    assert dropped["weights"]["dropped"] and dropped["weights"]["dropped_at"]
    page = client.get(f"/checkpoints/{first.id}")
    assert page.status_code == 200 and 'id="weights-dropped"' in page.text
    assert not client.get(f"/api/checkpoints/{last.id}").json()["weights"]["dropped"]
    assert 'id="weights-dropped"' not in client.get(f"/checkpoints/{last.id}").text
    # the optimizer state: the page says where a next step would find one and where not
    assert client.get(f"/api/checkpoints/{last.id}").json()["weights"]["optimizer_bytes"] > 0
    assert client.get(f"/api/checkpoints/{second.id}").json()["weights"]["optimizer_bytes"] is None
    state = re.search(
        r'id="optimizer-state">(.*?)</dd>', client.get(f"/checkpoints/{second.id}").text, re.S
    )
    assert "none on disk" in state.group(1) and "fresh AdamW" in state.group(1)
    # the lineage of the last checkpoint still runs through the dropped one, marked
    page = client.get(f"/checkpoints/{last.id}")
    assert page.text.count("weights dropped") == 1
    assert client.get(f"/runs/{run_id}").status_code == 200
    asyncio.run(workbench.stop())


# -- the disk budget, on checkpoints whose folders are written here ---------------------------


def adapter_of(folder: Path, size: int) -> None:
    """An adapter folder that reads as one (`whale check` opens it) and holds about `size`
    bytes."""
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    save_file(
        {"w": np.zeros(size, dtype=np.uint8)}, folder / "adapter" / "adapter_model.safetensors"
    )


def run_with_checkpoints(workbench: Workbench, kind: str, sizes: list[int]) -> tuple[int, list]:
    """A run whose weight phase started from the base and made one checkpoint per size (RFT
    steps 0, 1, ...), each folder holding that many bytes; none is evaluated on test yet."""
    root = workbench.settings.home / "checkpoints"

    def create(s):
        run = Run(name="r", kind=kind, domain="arith", status="running", desired="running")
        s.add(run)
        s.flush()
        harness = Harness(run_id=run.id, name="h.py", code="", sha=sha_of(""))
        base = Checkpoint(name="base", kind="base")
        s.add_all([harness, base])
        s.flush()
        s.add(Phase(run_id=run.id, kind="weight", round=1, status="running",
                    harness_in_id=harness.id, checkpoint_in_id=base.id))  # fmt: skip
        parent, made = base, []
        for step, size in enumerate(sizes):
            job = TrainingJob(run_id=run.id, harness_id=harness.id, checkpoint_in_id=parent.id,
                              step=step, status="done")  # fmt: skip
            s.add(job)
            s.flush()
            path = root / f"run-{run.id}" / f"job-{job.id}"
            adapter_of(path, size)
            parent = Checkpoint(run_id=run.id, parent_id=parent.id, kind="lora", name=str(path),
                                path=str(path), training_job_id=job.id, size_bytes=size)  # fmt: skip
            s.add(parent)
            s.flush()
            job.checkpoint_out_id = parent.id
            made.append(parent)
        return run.id, made

    return workbench.writer.submit(create).result()


@pytest.fixture
def workbench(tmp_path):
    workbench = Workbench(Settings(home=tmp_path / "home"), say=lambda _: None)
    yield workbench
    asyncio.run(workbench.stop())


def dropped(workbench, checkpoints) -> list[bool]:
    with workbench.session() as s:
        return [s.get(Checkpoint, c.id).weights_dropped_at is not None for c in checkpoints]


def test_over_the_disk_budget_the_oldest_kept_checkpoints_go_first(workbench):
    run_id, made = run_with_checkpoints(workbench, "rft", [1000] * 5)
    cfg = RFTConfig(keep_last=3, max_disk_gb=2500 / GB)  # keep_last alone would keep 3000 bytes
    asyncio.run(retain(workbench, run_id, cfg))
    assert dropped(workbench, made) == [True, True, True, False, False]
    assert [Path(c.path).exists() for c in made] == [False, False, False, True, True]


def test_only_the_newest_checkpoint_keeps_its_optimizer_state(workbench):
    """AdamW's state is twice a full model's weights and only the next step reads it: a kept
    checkpoint keeps its weights alone, and the budget counts what is left on disk."""
    run_id, made = run_with_checkpoints(workbench, "rft", [1000] * 3)
    for checkpoint in made:
        (Path(checkpoint.path) / OPTIMIZER_FILE).write_bytes(bytes(2000))
    root = workbench.settings.home / "checkpoints"
    # about 9 kB with every optimizer state, 5 kB with the newest's alone: under 6 kB, all stay
    asyncio.run(retain(workbench, run_id, RFTConfig(keep_last=3, max_disk_gb=6000 / GB)))
    assert dropped(workbench, made) == [False, False, False]
    assert [(Path(c.path) / OPTIMIZER_FILE).exists() for c in made] == [False, False, True]
    assert all((Path(c.path) / "adapter" / "adapter_model.safetensors").is_file() for c in made)
    assert disk_bytes(root) < 6000


def test_a_test_evaluation_or_a_phase_keeps_its_checkpoint_whatever_the_rules(workbench):
    run_id, made = run_with_checkpoints(workbench, "rft", [10] * 4)

    def evaluate(s):
        harness = s.exec(select(Harness).where(Harness.run_id == run_id)).one()
        test = Evaluation(run_id=run_id, harness_id=harness.id, checkpoint_id=made[0].id,
                          split="test", k=1, n_tasks=1, status="done")  # fmt: skip
        s.add(test)
        # an evaluation still sampling from checkpoint 2 (e.g. started from the web)
        s.add(Evaluation(run_id=run_id, harness_id=harness.id, checkpoint_id=made[1].id,
                         split="train", k=1, n_tasks=1, status="running"))  # fmt: skip
        s.flush()
        return test.id

    test_evaluation_id = workbench.writer.submit(evaluate).result()
    with pytest.raises(DiskBudgetExceeded):  # what it must keep is over the budget alone
        asyncio.run(retain(workbench, run_id, RFTConfig(keep_last=1, max_disk_gb=1e-9)))
    with workbench.session() as s:
        checks = run_checks(s, run_id)
    # the test point's, the running evaluation's and the newest stay, even over the budget
    assert dropped(workbench, made) == [False, False, True, False]
    (kept,) = [c for c in checks if c.name == "checkpoints"]
    assert kept.ok, kept.broken
    # `whale check` tells a dropped checkpoint the run still refers to
    workbench.writer.submit(
        lambda s: setattr(s.get(Checkpoint, made[0].id), "weights_dropped_at", now())
    ).result()
    with workbench.session() as s:
        (kept,) = [c for c in run_checks(s, run_id) if c.name == "checkpoints"]
    assert kept.broken == [
        f"checkpoint {made[0].id}: its weights were dropped, but evaluated on the test split "
        f"(evaluation {test_evaluation_id})"
    ]


def test_a_single_training_over_the_budget_fails_naming_the_folder(workbench):
    run_id, made = run_with_checkpoints(workbench, "rft", [1000])
    root = workbench.settings.home / "checkpoints"
    with pytest.raises(DiskBudgetExceeded, match=re.escape(f"{root} holds 0.00 GB")):
        asyncio.run(retain(workbench, run_id, RFTConfig(max_disk_gb=500 / GB)))
    assert dropped(workbench, made) == [False]  # the newest is served: never dropped


def test_a_loop_over_the_budget_pauses_naming_the_folder_until_resumed(workbench):
    run_id, made = run_with_checkpoints(workbench, "experiment", [1000, 1000])
    outcome = {}

    def retain_in_thread():
        outcome["dropped"] = asyncio.run(
            retain(workbench, run_id, RFTConfig(keep_last=2, max_disk_gb=500 / GB))
        )

    thread = threading.Thread(target=retain_in_thread)
    thread.start()
    for _ in range(100):
        with workbench.session() as s:
            if s.get(Run, run_id).desired == "paused":
                break
        thread.join(0.1)
    with workbench.session() as s:
        assert s.get(Run, run_id).desired == "paused"
        pause = s.exec(select(Event).where(Event.run_id == run_id, Event.kind == "control")).one()
    root = workbench.settings.home / "checkpoints"
    assert f"{root} holds" in pause.detail["reason"] and "max_disk_gb" in pause.detail["reason"]
    assert thread.is_alive()  # waiting for the resume
    asyncio.run(control.apply(workbench.writer, run_id, "resume", "room made", "cli"))
    thread.join(30)
    assert outcome["dropped"] == [made[0].id]
    assert dropped(workbench, made) == [True, False]
    # a checkpoint without weights cannot be promoted: the loop would serve a missing folder
    with pytest.raises(control.Refused, match="weights were dropped"):
        asyncio.run(
            control.apply(workbench.writer, run_id, "promote", "", "cli", checkpoint_id=made[0].id)
        )


def test_retention_keys_are_checked():
    with pytest.raises(ValueError, match="keep_last"):
        RFTConfig(keep_last=0)
    with pytest.raises(ValueError, match="max_disk_gb"):
        RFTConfig(max_disk_gb=-1)
