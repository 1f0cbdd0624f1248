"""A weight phase's training process stays up between steps: the second step trains on the
model and optimizer it holds, ends where two separate processes end, and a killed trainer is
started again from the checkpoint on disk."""

import asyncio
import time

import pytest
import torch
from safetensors.torch import load_file

from app.training.job import Trainer, run_trainer
from tests.training.test_train import spec_for


def two_steps(tmp_path, base, lora: bool, optimizer: str = "phase") -> tuple[dict, dict]:
    """The specs of two steps of one phase, the second continuing the first (as rft.py makes
    them), each one pass of 2 batches carrying one AdamW ("phase") or each a fresh one."""
    weights = "adapter" if lora else "merged"
    first = spec_for(
        tmp_path, base, lora=lora, epochs=1, optimizer_state=optimizer, output=str(tmp_path / "c1")
    )
    second = {**first, "output": str(tmp_path / "c2")}
    if optimizer == "phase":
        second["optimizer_in"] = str(tmp_path / "c1" / "optimizer.pt")
    if lora:
        second["init_adapter"] = str(tmp_path / "c1" / weights)
    else:
        second["lr"] = 1e-5
        first["lr"] = second["lr"]
        second["base_model"] = str(tmp_path / "c1" / weights)
    return first, second


def weights_of(folder) -> dict:
    name = "adapter_model.safetensors" if (folder / "adapter").is_dir() else "model.safetensors"
    sub = "adapter" if (folder / "adapter").is_dir() else "merged"
    return load_file(folder / sub / name)


def assert_same_weights(a, b) -> None:
    wa, wb = weights_of(a), weights_of(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert (wa[key] - wb[key]).abs().max().item() < 1e-5, key


@pytest.mark.parametrize(
    ("lora", "optimizer"),
    [(True, "phase"), (False, "phase"), (True, "step")],
    ids=["lora", "full", "lora-fresh-adamw"],
)
def test_a_kept_trainer_trains_as_separate_processes_do(tmp_path, tiny_model, lora, optimizer):
    base = tiny_model
    kept, apart = tmp_path / "kept", tmp_path / "apart"
    kept.mkdir(), apart.mkdir()

    async def in_one_process():
        trainer = Trainer(kept / "trainer")
        try:
            results = []
            for n, spec in enumerate(two_steps(kept, base, lora, optimizer)):
                results.append(await trainer.step(spec, kept / f"job{n}", lambda e: None))
            return results
        finally:
            await trainer.close()

    first, second = asyncio.run(in_one_process())
    assert first["kept_loaded"] is False and second["kept_loaded"] is True
    carried = optimizer == "phase"
    assert second["optimizer_continued"] == carried
    assert (kept / "c2" / "optimizer.pt").is_file() == carried
    for n, spec in enumerate(two_steps(apart, base, lora, optimizer)):
        done = asyncio.run(run_trainer(spec, apart / f"job{n}", lambda e: None))
        assert done["kept_loaded"] is False
    assert_same_weights(kept / "c2", apart / "c2")
    # each job keeps its slice of the process's log, the command line first
    assert (kept / "job1" / "train.log").read_text().startswith("$ ")


def adam_steps(checkpoint) -> set[float]:
    """The AdamW step counts of every parameter in a checkpoint's optimizer.pt."""
    state = torch.load(checkpoint / "optimizer.pt", weights_only=True)["state"]
    return {float(p["step"]) for p in state.values()}


def test_a_killed_trainer_is_started_again_from_the_checkpoint_on_disk(tmp_path, tiny_model):
    """Killed between two steps, the trainer comes back from the first step's checkpoint and
    its AdamW state, and ends where a trainer that was never killed ends: the same weights and
    the same optimizer step count (not only the trainer's own word that it continued)."""
    base = tiny_model
    killed, unkilled = tmp_path / "killed", tmp_path / "unkilled"
    killed.mkdir(), unkilled.mkdir()
    first, second = two_steps(killed, base, lora=True)

    async def steps():
        trainer = Trainer(killed / "trainer")
        try:
            await trainer.step(first, killed / "job0", lambda e: None)
            saved = killed / "c1" / "optimizer.pt"  # written while the next step samples
            deadline = time.monotonic() + 120
            while not saved.exists():
                assert time.monotonic() < deadline, "the first step's optimizer.pt never came"
                await asyncio.sleep(0.1)
            pid = trainer.proc.pid
            await trainer.kill()  # as an out-of-memory kill between two steps would
            done = await trainer.step(second, killed / "job1", lambda e: None)
            return pid, trainer.proc.pid, done
        finally:
            await trainer.close()

    before, after, done = asyncio.run(steps())
    assert after != before and done["kept_loaded"] is False and done["optimizer_continued"]
    for n, spec in enumerate(two_steps(unkilled, base, lora=True)):
        asyncio.run(run_trainer(spec, unkilled / f"job{n}", lambda e: None))
    assert_same_weights(killed / "c2", unkilled / "c2")
    steps_once = adam_steps(killed / "c1")
    assert len(steps_once) == 1 and steps_once.pop() > 0
    # the second step continued the first's AdamW: twice its count, as the unkilled run's
    assert (
        adam_steps(killed / "c2")
        == adam_steps(unkilled / "c2")
        == {2 * adam_steps(killed / "c1").pop()}
    )
