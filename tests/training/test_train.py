"""The training process: on the real model it learns what it is shown and saves whole checkpoints;
on the small one (conftest.py) its optimizer and batches are counted as the spec asks."""

import asyncio
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from app.llm.local import prepare_model
from app.llm.local_server import load_weights
from app.training.examples import encode
from app.training.job import TrainingError, run_trainer
from app.training.train import mini_batches, nll_sum

EXAMPLES = [
    {
        "messages": [{"role": "user", "content": f"What is {a} + {b}?"}],
        "completion": f"The answer is {a + b}.",
        "finish_reason": "stop",
    }
    for a, b in [(12, 30), (25, 17), (40, 41), (33, 66)]
]


def spec_for(tmp_path, base, **overrides) -> dict:
    examples = tmp_path / "examples.jsonl"
    examples.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES))
    return {
        "base_model": str(base),
        "init_adapter": None,
        "examples": str(examples),
        "output": str(tmp_path / "ckpt"),
        "lora": True,
        "lora_rank": 8,
        "lora_alpha": 16,
        "lora_targets": ["q_proj", "v_proj", "up_proj", "down_proj"],
        "lr": 3e-3,
        "batch_size": 2,
        "epochs": 3,
        "max_seq_len": 128,
        "seed": 0,
        **overrides,
    }


def nll_of_examples(folder) -> float:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = load_weights(folder, torch.float32).eval()  # an adapter folder: merged into its base
    total = 0.0
    with torch.no_grad():
        for example in EXAMPLES:
            ids, labels = encode(tokenizer, example, 128)
            logits = model(input_ids=torch.tensor([ids])).logits
            loss, tokens = nll_sum(logits, torch.tensor([labels]))  # the loss the trainer sums
            total += loss.item() / tokens
    return total / len(EXAMPLES)


def test_training_lowers_the_loss_on_its_examples_and_saves_its_adapter(tmp_path, model_cache):
    base = prepare_model(model_cache)
    events = []
    done = asyncio.run(run_trainer(spec_for(tmp_path, base), tmp_path / "job", events.append))
    assert [e["batch"] for e in events] == list(range(1, 7))  # 4 examples / 2 x 3 epochs
    assert done["examples"] == 4 and done["tokens"] > 0
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "adapter" / "adapter_config.json").exists()
    # the adapter alone: no merged copy of the whole model at every step
    assert not (ckpt / "merged").exists() and (ckpt / "adapter" / "tokenizer_config.json").exists()
    assert not (tmp_path / "ckpt.tmp").exists()
    assert nll_of_examples(ckpt / "adapter") < 0.8 * nll_of_examples(base)
    # continuing from the adapter keeps what was learned
    again = spec_for(
        tmp_path,
        base,
        init_adapter=str(ckpt / "adapter"),
        output=str(tmp_path / "ckpt2"),
        epochs=1,
        lr=1e-6,
    )
    asyncio.run(run_trainer(again, tmp_path / "job2", lambda e: None))
    assert nll_of_examples(tmp_path / "ckpt2" / "adapter") < 0.8 * nll_of_examples(base)


@pytest.mark.slow
def test_a_phase_carries_one_optimizer_from_step_to_step(tmp_path, tiny_model):
    """optimizer_state "phase": each step saves AdamW's state with its checkpoint and the next
    step continues it (its step count and moments go on); "step": a fresh AdamW, nothing kept."""
    base = tiny_model

    def adam_steps(folder) -> set[int]:
        state = torch.load(folder / "optimizer.pt", weights_only=True)["state"]
        return {int(s["step"]) for s in state.values()}

    first = spec_for(tmp_path, base, optimizer_state="phase", epochs=1)  # 2 batches
    done = asyncio.run(run_trainer(first, tmp_path / "job", lambda e: None))
    assert done["optimizer_carried"] is True and adam_steps(tmp_path / "ckpt") == {2}
    second = spec_for(
        tmp_path,
        base,
        optimizer_state="phase",
        epochs=1,
        init_adapter=str(tmp_path / "ckpt" / "adapter"),
        optimizer_in=str(tmp_path / "ckpt" / "optimizer.pt"),
        output=str(tmp_path / "ckpt2"),
    )
    asyncio.run(run_trainer(second, tmp_path / "job2", lambda e: None))
    assert adam_steps(tmp_path / "ckpt2") == {4}  # 2 + 2: one optimizer over both steps

    fresh = spec_for(
        tmp_path, base, optimizer_state="step", epochs=1, output=str(tmp_path / "ckpt3")
    )
    done = asyncio.run(run_trainer(fresh, tmp_path / "job3", lambda e: None))
    assert done["optimizer_carried"] is False and not (tmp_path / "ckpt3" / "optimizer.pt").exists()


def test_a_failing_job_says_why_and_writes_no_checkpoint(tmp_path):
    spec = spec_for(tmp_path, tmp_path / "no-such-model")
    with pytest.raises(TrainingError, match="no-such-model"):
        asyncio.run(run_trainer(spec, tmp_path / "job", lambda e: None))
    assert not (tmp_path / "ckpt").exists()


def test_rollout_mini_batches_hold_whole_rollouts_and_calls_alone_otherwise():
    """batch_unit "rollout" forms the release's SFT mini-batches: `batch_size` whole accepted
    rollouts per optimizer step, each rollout's calls together and in order."""
    # rollouts 1..5 with 3, 1, 2, 4 and 1 calls: 11 examples
    calls = {1: 3, 2: 1, 3: 2, 4: 4, 5: 1}
    encoded = [([r, c], [-100, c], r) for r, n in calls.items() for c in range(n)]
    steps = mini_batches(encoded, batch_size=2, unit="rollout", seed=0)
    assert len(steps) == 3  # ceil(5 rollouts / 2): one optimizer step per 2 rollouts
    rollouts = [[row[2] for row in step] for step in steps]
    assert [len(set(r)) for r in rollouts] == [2, 2, 1]
    assert sorted(row for step in steps for row in step) == sorted(encoded)  # each call once
    for step in steps:
        for r in {row[2] for row in step}:  # a rollout's calls: all in this step, in order
            assert [row[1][1] for row in step if row[2] == r] == list(range(calls[r]))
    assert mini_batches(encoded, 2, "rollout", 0) == steps  # the same on every process
    assert mini_batches(encoded, 2, "rollout", 1) != steps  # shuffled by the seed
    # "call": batch_size examples per step, whatever rollout they come from
    assert [len(s) for s in mini_batches(encoded, 4, "call", 0)] == [4, 4, 3]
    with pytest.raises(ValueError, match="batch_unit"):
        mini_batches(encoded, 2, "trajectory", 0)


def test_a_rollout_step_trains_its_calls_together_and_micro_batches_change_nothing(
    tmp_path, tiny_model
):
    """Through the training process: 4 examples from 2 rollouts at batch_size 1 are 2 optimizer
    steps of 2 calls each; one forward per call (micro_batch_size 1) gives the same token-mean
    loss as both calls at once; [rft] weight_decay is AdamW's (verl's default 0.01)."""
    base = tiny_model
    examples = [{**e, "rollout_id": 7 + i // 2} for i, e in enumerate(EXAMPLES)]

    def train(name, **overrides):
        spec = spec_for(tmp_path, base, epochs=1, batch_size=1, batch_unit="rollout", **overrides)
        spec["output"] = str(tmp_path / name)
        Path(spec["examples"]).write_text("".join(json.dumps(e) + "\n" for e in examples))
        events = []
        done = asyncio.run(run_trainer(spec, tmp_path / f"job-{name}", events.append))
        return done, events

    done, events = train("whole", optimizer_state="run", weight_decay=0.01)
    assert [(e["batch"], e["of"]) for e in events] == [(1, 2), (2, 2)]
    saved = torch.load(tmp_path / "whole" / "optimizer.pt", weights_only=True)
    assert {g["weight_decay"] for g in saved["param_groups"]} == {0.01}
    tokenizer = AutoTokenizer.from_pretrained(base)
    per_rollout = [
        sum(sum(t != -100 for t in encode(tokenizer, e, 128)[1][1:]) for e in examples[i : i + 2])
        for i in (0, 2)
    ]
    assert sorted(e["tokens"] for e in events) == sorted(per_rollout)  # both calls in each step
    _, micro = train("micro", optimizer_state="run", weight_decay=0.01, micro_batch_size=1)
    assert [e["loss"] for e in micro] == pytest.approx([e["loss"] for e in events], rel=1e-4)
