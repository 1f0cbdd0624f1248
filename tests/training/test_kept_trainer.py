"""A weight phase's training process stays up between steps: the second step trains on the
model and optimizer it holds, ends where two separate processes end, and a killed trainer is
started again from the checkpoint on disk."""

import asyncio

import pytest
from safetensors.torch import load_file

from app.llm.local import prepare_model
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
def test_a_kept_trainer_trains_as_separate_processes_do(tmp_path, model_cache, lora, optimizer):
    base = prepare_model(model_cache)
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


def test_a_killed_trainer_is_started_again_from_the_checkpoint_on_disk(tmp_path, model_cache):
    base = prepare_model(model_cache)
    first, second = two_steps(tmp_path, base, lora=True)

    async def steps():
        trainer = Trainer(tmp_path / "trainer")
        try:
            await trainer.step(first, tmp_path / "job0", lambda e: None)
            saved = tmp_path / "c1" / "optimizer.pt"  # written while the next step samples
            while not saved.exists():
                await asyncio.sleep(0.1)
            pid = trainer.proc.pid
            await trainer.kill()  # as an out-of-memory kill between two steps would
            done = await trainer.step(second, tmp_path / "job1", lambda e: None)
            return pid, trainer.proc.pid, done
        finally:
            await trainer.close()

    before, after, done = asyncio.run(steps())
    assert after != before and done["kept_loaded"] is False and done["optimizer_continued"]
    assert (tmp_path / "c2" / "adapter" / "adapter_config.json").exists()
