"""The training process: `python -m app.training SPEC.json`.

Reads the spec (base model, optional adapter to continue from, examples file, hyperparameters,
output folder), makes one pass over the examples with token-mean negative log-likelihood on
completion tokens (no KL, no advantage, no clipping), saves the checkpoint and prints progress
as JSON lines on stdout: {"event": "batch", ...} per optimizer step, then {"event": "done", ...}.

The checkpoint folder holds `adapter/` (LoRA, what vLLM hot-loads) and `merged/` (full weights,
what servers without adapter support load), written to a temporary folder and renamed at the end
so a crash or a full disk never leaves a half checkpoint.
"""
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.training.examples import encode


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


def load_model(spec: dict):
    base = spec["base_model"]
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if not spec["lora"]:
        return model
    from peft import LoraConfig, PeftModel, get_peft_model

    if spec.get("init_adapter"):
        return PeftModel.from_pretrained(model, spec["init_adapter"], is_trainable=True)
    config = LoraConfig(r=spec["lora_rank"], lora_alpha=spec["lora_alpha"],
                        target_modules=spec["lora_targets"], lora_dropout=0.0,
                        task_type="CAUSAL_LM")  # fmt: skip
    return get_peft_model(model, config)


def batches(encoded: list, batch_size: int, pad_id: int):
    for i in range(0, len(encoded), batch_size):
        chunk = encoded[i : i + batch_size]
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.full((len(chunk), width), pad_id)
        labels = torch.full((len(chunk), width), -100)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, (x, y) in enumerate(chunk):
            ids[row, : len(x)], labels[row, : len(y)], mask[row, : len(x)] = (
                torch.tensor(x), torch.tensor(y), 1)  # fmt: skip
        yield ids, mask, labels


def token_mean_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Mean NLL over every labelled token of the batch (not a mean of per-example means)."""
    logits, labels = logits[:, :-1], labels[:, 1:]
    n = int((labels != -100).sum())
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                           ignore_index=-100, reduction="sum")  # fmt: skip
    return loss / max(n, 1), n


def train(spec: dict) -> dict:
    torch.manual_seed(spec["seed"])
    tokenizer = AutoTokenizer.from_pretrained(spec["base_model"])
    examples = [json.loads(line) for line in open(spec["examples"])]
    encoded = [encode(tokenizer, e, spec["max_seq_len"]) for e in examples]
    encoded = [(ids, labels) for ids, labels in encoded if any(t != -100 for t in labels[1:])]
    random.Random(spec["seed"]).shuffle(encoded)
    model = load_model(spec)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=spec["lr"], weight_decay=0.0)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    total_batches = spec["epochs"] * math.ceil(len(encoded) / spec["batch_size"])
    losses, tokens, done, start = [], 0, 0, time.monotonic()
    for _ in range(spec["epochs"]):
        for ids, mask, labels in batches(encoded, spec["batch_size"], pad):
            logits = model(input_ids=ids, attention_mask=mask).logits
            loss, n = token_mean_nll(logits, labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            done += 1
            tokens += n
            losses.append(loss.item())
            emit(event="batch", batch=done, of=total_batches, loss=losses[-1], tokens=n,
                 tokens_per_s=tokens / (time.monotonic() - start))  # fmt: skip
    out = Path(spec["output"])
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.eval()
    if spec["lora"]:
        model.save_pretrained(tmp / "adapter")
        model = model.merge_and_unload()
    model.save_pretrained(tmp / "merged")
    tokenizer.save_pretrained(tmp / "merged")
    tmp.rename(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {"event": "done", "loss": sum(losses) / len(losses) if losses else None,
            "tokens": tokens, "batches": done, "examples": len(encoded), "size_bytes": size,
            "seconds": time.monotonic() - start}  # fmt: skip


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    emit(**train(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
