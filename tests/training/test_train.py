"""The training process on the real model: it learns what it is shown and saves whole checkpoints."""

import asyncio
import json

import pytest
import torch
from transformers import AutoTokenizer

from app.llm.local import prepare_model
from app.llm.local_server import load_weights
from app.training.examples import encode
from app.training.job import TrainingError, run_trainer
from app.training.train import token_mean_nll

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
            total += token_mean_nll(logits, torch.tensor([labels]))[0].item()
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
def test_a_phase_carries_one_optimizer_from_step_to_step(tmp_path, model_cache):
    """optimizer_state "phase": each step saves AdamW's state with its checkpoint and the next
    step continues it (its step count and moments go on); "step": a fresh AdamW, nothing kept."""
    base = prepare_model(model_cache)

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
