"""Training under `accelerate launch`: two CPU processes (DDP over gloo) share the examples and
the main process alone reports progress and writes a checkpoint vLLM and transformers load."""

import asyncio
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.llm.local_server import load_weights
from app.llm.vllm import check_adapter
from app.training.examples import encode
from app.training.job import run_trainer, trainer_command
from tests.training.test_train import spec_for

CPU_2PROC = Path(__file__).resolve().parents[2] / "configs" / "accelerate" / "cpu-2proc.yaml"
FIFTH = {
    "messages": [{"role": "user", "content": "What is 7 + 8?"}],
    "completion": "The answer is 15.",
    "finish_reason": "stop",
}


def test_the_command_is_plain_unless_accelerate_is_configured():
    assert trainer_command() == [sys.executable, "-m", "app.training"]
    assert trainer_command(Path("c.yaml"), "--num_processes 4 --machine_rank 1") == [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        "c.yaml",
        "--num_processes",
        "4",
        "--machine_rank",
        "1",
        "-m",
        "app.training",
    ]


def test_two_processes_train_one_checkpoint_written_once(tmp_path, tiny_model, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # CPU processes, on a GPU host too
    base = tiny_model
    spec = spec_for(tmp_path, base, epochs=2)
    with open(spec["examples"], "a") as f:  # 5 examples: the last step has one for one process
        f.write(json.dumps(FIFTH) + "\n")
    events = []
    done = asyncio.run(
        run_trainer(spec, tmp_path / "job", events.append, trainer_command(CPU_2PROC))
    )
    assert done["processes"] == 2 and done["examples"] == 5
    # batch_size 2 over 2 processes: 3 steps per epoch, each reported once, by the main process
    assert [e["batch"] for e in events] == list(range(1, 7))
    assert all(e["of"] == 6 for e in events)
    # every labelled token trained once per epoch: no example dropped nor repeated by the sharding
    tokenizer = AutoTokenizer.from_pretrained(base)
    examples = [json.loads(line) for line in open(spec["examples"])]
    labelled = sum(sum(t != -100 for t in encode(tokenizer, e, 128)[1][1:]) for e in examples)
    assert done["tokens"] == 2 * labelled
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "adapter" / "adapter_model.safetensors").exists()
    assert not (tmp_path / "ckpt.tmp").exists()
    check_adapter(ckpt / "adapter", base)
    merged = load_weights(ckpt / "adapter", torch.float32).state_dict()
    original = AutoModelForCausalLM.from_pretrained(base).state_dict()
    assert merged.keys() == original.keys()
    assert any(not torch.equal(merged[k], original[k]) for k in original)
    command_line = (tmp_path / "job" / "train.log").read_text().splitlines()[0]
    assert "accelerate.commands.launch" in command_line


def test_a_per_rank_mini_batch_steps_on_batch_size_times_the_processes(
    tmp_path, tiny_model, monkeypatch
):
    """batch_scope "rank" (verl's SFT mini-batch): each process takes batch_size examples a
    step, so 2 processes at 2 each step on 4: 5 examples make 2 optimizer steps, not 3."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    base = tiny_model
    spec = spec_for(tmp_path, base, epochs=1, batch_scope="rank")
    with open(spec["examples"], "a") as f:
        f.write(json.dumps(FIFTH) + "\n")
    events = []
    done = asyncio.run(
        run_trainer(spec, tmp_path / "job", events.append, trainer_command(CPU_2PROC))
    )
    assert done["processes"] == 2 and done["examples"] == 5
    assert [e["batch"] for e in events] == [1, 2] and all(e["of"] == 2 for e in events)
