"""RFT training throughput: the workbench's training job against TRL's SFTTrainer on the same
examples, model and hyperparameters (LoRA, completion-only loss, one pass).

Both train the embedded model (SmolLM2-135M-Instruct) on the same chat examples - prompt
messages -> completion, the shape accepted rollouts give - and both are timed over the same span:
the optimizer-step loop, from its first batch to its last optimizer step (model loading, the
examples' tokenization, the trainer's set-up and saving excluded on both sides). The workbench's
job reports that span itself (`train_seconds`, app/training/train.py); TRL's is taken by a
callback, from `on_epoch_begin` to the last `on_step_end`; TRL's whole `trainer.train()` call is
printed beside it. Tokens/s = the examples' tokens (prompt and completion, as encoded for
training) over that span. TRL is not a dependency of the
workbench: `"$(cat .venv/.shared)/bin/pip" install 'trl>=1.0'` first (the shared environment, see scripts/setup.sh).

    python -m benchmarks.rft_throughput [--examples N]
"""

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from app.config import Settings
from app.experiment_schema import RFTConfig
from app.llm.local import prepare_model
from app.training.examples import encode
from app.training.job import run_trainer
from benchmarks.common import parse, report, table

SYSTEM = (
    "You are a careful assistant. Solve the arithmetic problem, show one line of working, "
    "then give the final answer as 'The answer is N.'"
)


def examples(n: int) -> list[dict]:
    rng = random.Random(0)
    rows = []
    for _ in range(n):
        a, b, c = rng.randint(10, 999), rng.randint(10, 999), rng.randint(2, 9)
        question = f"A shop has {a} apples, receives {b} more, then sells them in bags of {c}. How many full bags?"
        answer = (a + b) // c
        rows.append(
            {
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": question},
                ],
                "completion": f"{a} + {b} = {a + b}; {a + b} // {c} = {answer}. The answer is {answer}.",
                "finish_reason": "stop",
            }
        )
    return rows


def workbench_job(base: Path, rows: list[dict], cfg: RFTConfig, work: Path) -> float:
    """The real training job (`python -m app.training` in its own process); its loop's seconds."""
    work.mkdir(parents=True)
    path = work / "examples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {
        "base_model": str(base),
        "init_adapter": None,
        "examples": str(path),
        "output": str(work / "ckpt"),
        "lora": True,
        "lora_rank": cfg.lora_rank,
        "lora_alpha": cfg.lora_alpha,
        "lora_targets": cfg.lora_targets,
        "lr": cfg.lr,
        "batch_size": cfg.batch_size,
        "epochs": 1,
        "max_seq_len": cfg.max_seq_len,
        "seed": 0,
    }
    done = asyncio.run(run_trainer(spec, work / "job", lambda event: None))
    return done["train_seconds"]


def trl_sft(base: Path, rows: list[dict], cfg: RFTConfig, work: Path) -> float:
    """TRL's SFTTrainer on the same examples as prompt/completion conversations; the seconds of
    its optimizer-step loop (the span the workbench's job reports)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class LoopClock(TrainerCallback):
        """From the start of the (one) epoch's batches to the end of its last optimizer step."""

        start = end = None

        def on_epoch_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.end = time.perf_counter()

    data = Dataset.from_list(
        [
            {
                "prompt": r["messages"],
                "completion": [{"role": "assistant", "content": r["completion"]}],
            }
            for r in rows
        ]
    )
    args = SFTConfig(
        output_dir=str(work / "trl"),
        per_device_train_batch_size=cfg.batch_size,
        num_train_epochs=1,
        learning_rate=cfg.lr,
        max_length=cfg.max_seq_len,
        completion_only_loss=True,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1000,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=1.0,
        seed=0,
        dataloader_num_workers=0,
    )
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        target_modules=cfg.lora_targets,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    clock = LoopClock()
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=data,
        peft_config=peft,
        processing_class=AutoTokenizer.from_pretrained(base),
        callbacks=[clock],
    )
    start = time.perf_counter()
    trainer.train()
    whole = time.perf_counter() - start
    print(f"TRL SFTTrainer: the whole trainer.train() call took {whole:.1f} s", flush=True)
    return clock.end - clock.start


def main(n: int) -> None:
    base = prepare_model(Settings().models_dir)
    cfg = RFTConfig(max_seq_len=512)  # the figures in docs/benchmarks.md were measured at 512
    rows = examples(n)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokens = sum(len(encode(tokenizer, r, cfg.max_seq_len)[0]) for r in rows)
    results = []
    with tempfile.TemporaryDirectory(prefix="whale-rft-bench-") as work:
        for name, train in (("workbench RFT job", workbench_job), ("TRL SFTTrainer", trl_sft)):
            seconds = train(base, rows, cfg, Path(work) / name.split()[0])
            results.append((name, seconds))
            print(
                f"{name}: optimizer-step loop {seconds:.1f} s, {tokens / seconds:.0f} tokens/s",
                flush=True,
            )
    trl_rate = tokens / results[1][1]
    report(
        "RFT training throughput against TRL (CPU)",
        table(
            [
                "trainer",
                "examples",
                "tokens",
                "optimizer-step loop s",
                "tokens/s",
                "ratio to TRL",
            ],
            [
                [name, n, tokens, f"{s:.1f}", f"{tokens / s:.0f}", f"{tokens / s / trl_rate:.2f}"]
                for name, s in results
            ],
        ),
        f"SmolLM2-135M-Instruct in float32 on the CPU, LoRA rank {cfg.lora_rank} on "
        f"{', '.join(cfg.lora_targets)}, batch {cfg.batch_size}, one pass, lr {cfg.lr}, loss on "
        "completion tokens only; chat examples of ~90 tokens (system and user prompt, a short "
        "worked answer). Seconds: the same span on both sides, the optimizer-step loop from "
        "its first batch to its last optimizer step (the workbench job's own `train_seconds`; "
        "for TRL, a callback from `on_epoch_begin` to the last `on_step_end`), without model "
        "loading, tokenization, set-up or saving. Produced by `python -m "
        f"benchmarks.rft_throughput --examples {n}`.",
        replace=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=256)
    main(parse(parser).examples)
