"""A weight phase's per-step overhead: a training process per step against one kept for the phase.

    python -m benchmarks.trainer_overhead [--steps 3] [--model FOLDER] [--random-model HIDDEN:LAYERS]
        [--accelerate-args "--num_processes 1"] [--json OUT.json] [--report]

Chains `--steps` RFT steps on the same accepted examples (each step continues from the last
checkpoint and its optimizer, as a weight phase does), LoRA and full fine-tune, once with a new
training process per step (`run_trainer`, how every step ran before) and once with one process
kept up (`Trainer`, app/training/job.py). Per step it times the whole step as the workbench sees
it and the optimizer's own work (the trainer's `train_seconds`); the overhead is the rest:
starting the process, importing torch and transformers, loading the model and optimizer, and
saving the checkpoint. Sampling is not part of it.

`--random-model 2048:16` trains a randomly initialised Llama of that width and depth with the
demo model's tokenizer (a GPU host has no hub access; the time of a step does not depend on the
weights' values). `--accelerate-args` trains under `accelerate launch` (on a GPU: where it trains).
`--report` writes the section of docs/benchmarks.md; `--json` writes the figures.
"""

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from app.training.job import Trainer, run_trainer, trainer_command
from benchmarks.common import parse, report, stamp_commit, table

EXAMPLES = [
    {
        "messages": [{"role": "user", "content": f"What is {a} * {b}? Think step by step."}],
        "completion": f"{a} * {b} = {a} * {b // 10 * 10} + {a} * {b % 10} = {a * b}. "
        f"The answer is {a * b}.",
        "finish_reason": "stop",
    }
    for a in range(11, 15)
    for b in range(21, 25)
]


def spec_for(work: Path, base: Path, lora: bool, step: int) -> dict:
    """Step `step` of a chain: it continues from step - 1's checkpoint and optimizer."""
    examples = work / "examples.jsonl"
    if not examples.exists():
        examples.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES))
    out = work / f"step-{step}"
    spec = {
        "base_model": str(base),
        "init_adapter": None,
        "examples": str(examples),
        "output": str(out),
        "lora": lora,
        "lora_rank": 16,
        "lora_alpha": 32,
        "lora_targets": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "lr": 1e-5,
        "batch_size": 8,
        "epochs": 1,
        "max_seq_len": 256,
        "optimizer_state": "phase",
        "seed": 0,
        "optimizer_in": None,
    }
    if step:
        before = work / f"step-{step - 1}"
        spec["optimizer_in"] = str(before / "optimizer.pt")
        if lora:
            spec["init_adapter"] = str(before / "adapter")
        else:
            spec["base_model"] = str(before / "merged")
    return spec


async def chain(work: Path, base: Path, lora: bool, steps: int, kept: bool, command) -> list:
    """Per step: (wall seconds, the optimizer's seconds)."""
    times, trainer = [], Trainer(work / "trainer", command) if kept else None
    try:
        for step in range(steps):
            spec = spec_for(work, base, lora, step)
            start = time.monotonic()
            if kept:
                done = await trainer.step(spec, work / f"job-{step}", lambda e: None)
            else:
                done = await run_trainer(spec, work / f"job-{step}", lambda e: None, command)
            wall = time.monotonic() - start
            times.append((wall, done["train_seconds"], done.get("optimizer_wait_seconds", 0.0)))
            if step >= 2:  # the chain needs only the last checkpoint: disk stays small
                for old in (work / f"step-{step - 2}",):
                    for f in sorted(old.rglob("*"), reverse=True):
                        f.unlink() if f.is_file() else f.rmdir()
    finally:
        if trainer:
            await trainer.close()
    return times


def random_model(tokenizer_from: Path, shape: str, out: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    hidden, layers = (int(x) for x in shape.split(":"))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3 // 64 * 64,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 256),
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    params = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
    print(f"random Llama {hidden}x{layers}: {params / 1e6:.0f}M parameters", file=sys.stderr)
    return out


def measured_on() -> str:
    """When and where: the date, the machine, and its GPU if it has one."""
    import os
    import platform
    from datetime import UTC, datetime

    import torch

    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{stamp}; {platform.machine()}, {os.cpu_count()} cores{gpu}"


def summarize(times: list) -> dict:
    """Step 1 (a kept trainer starts then) and the later steps' mean, overhead = wall - train.
    `wait` is the time a step waited for the last step's optimizer state to be written: in a
    weight phase that write overlaps the next step's sampling, here nothing separates them."""
    overhead = [wall - train for wall, train, _ in times]
    later = overhead[1:] or overhead
    return {
        "first_wall_s": round(times[0][0], 2),
        "first_overhead_s": round(overhead[0], 2),
        "later_wall_s": round(statistics.mean(w for w, _, _ in times[1:] or times), 2),
        "later_overhead_s": round(statistics.mean(later), 2),
        "later_overhead_sd": round(statistics.stdev(later), 2) if len(later) > 1 else 0.0,
        "later_wait_s": round(statistics.mean(w for _, _, w in times[1:] or times), 2),
        "train_s": round(statistics.mean(t for _, t, _ in times), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", type=Path, help="weights folder (default: the demo model)")
    parser.add_argument("--random-model", help="HIDDEN:LAYERS of a random Llama to train")
    parser.add_argument("--accelerate-args", help="train under `accelerate launch` with these")
    parser.add_argument("--modes", default="lora,full")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--from-json", type=Path, help="write the report of an earlier --json")
    args = parse(parser, stamps=lambda a: not a.from_json)
    if args.from_json:
        write_report(json.loads(args.from_json.read_text()))
        return
    if args.model is None:
        from app.llm.local import prepare_model

        args.model = prepare_model(Path.home() / ".cache" / "whale" / "models")
    command = trainer_command(None, args.accelerate_args) if args.accelerate_args else None
    results = {}
    with tempfile.TemporaryDirectory(prefix="whale-trainer-") as tmp:
        base = args.model
        if args.random_model:
            base = random_model(args.model, args.random_model, Path(tmp) / "random")
        for mode in args.modes.split(","):
            for kept in (False, True):  # one after the other, the same chain each way
                work = Path(tmp) / f"{mode}-{'kept' if kept else 'apart'}"
                work.mkdir()
                times = asyncio.run(chain(work, base, mode == "lora", args.steps, kept, command))
                name = f"{mode} {'kept' if kept else 'per step'}"
                results[name] = summarize(times)
                print(name, results[name], file=sys.stderr)
    figures = {
        "command": "python -m benchmarks.trainer_overhead " + shlex.join(sys.argv[1:]),
        "commit": stamp_commit(args.allow_dirty),
        "measured": measured_on(),
        "steps": args.steps,
        "model": args.random_model or args.model.name,
        "accelerate": args.accelerate_args,
        "results": results,
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    if args.report:
        write_report(figures)


def describe(model: str) -> str:
    if ":" not in model:
        return model
    hidden, layers = model.split(":")
    return (
        f"a randomly initialised Llama of width {hidden} and {layers} layers with the demo"
        " model's tokenizer (what a step costs does not depend on the weights' values)"
    )


def write_report(figures: dict) -> None:
    if not figures["commit"].startswith("commit "):  # older JSON: its commit was not checked
        raise SystemExit(f"no stamp in these figures ({figures['commit']}): measure them again")
    rows, results = [], figures["results"]
    for mode in ("lora", "full"):
        apart, kept = results.get(f"{mode} per step"), results.get(f"{mode} kept")
        if not (apart and kept):
            continue
        for name, r in (("a process per step", apart), ("one process kept", kept)):
            wait = r.get("later_wait_s")
            rows.append(
                [
                    mode,
                    name,
                    r["first_wall_s"],
                    r["later_wall_s"],
                    r["train_s"],
                    f"{r['later_overhead_s']} ± {r['later_overhead_sd']}",
                    "" if wait is None else wait,
                ]
            )
        ratio = apart["later_overhead_s"] / max(kept["later_overhead_s"], 1e-3)
        hidden = kept.get("later_wait_s") or 0.0
        overlapped = apart["later_overhead_s"] / max(kept["later_overhead_s"] - hidden, 1e-3)
        rows.append(
            [
                mode,
                "overhead, per step / kept",
                "",
                "",
                "",
                f"{ratio:.1f}x lower"
                + (f"; {overlapped:.1f}x with the wait behind sampling" if hidden else ""),
                "",
            ]
        )
    where = f"`accelerate launch {figures['accelerate']}`" if figures["accelerate"] else "CPU"
    body = table(
        [
            "mode",
            "training process",
            "step 1 s",
            "steps 2+ s (mean)",
            "optimizer s",
            "overhead s, steps 2+ (mean ± sd)",
            "of it, waiting for the last AdamW write s",
        ],
        rows,
    )
    notes = (
        f"`{figures['command']}`: {describe(figures['model'])}, training on {where}."
        f" {figures['steps']}"
        " chained steps of 16 examples (2 optimizer steps each), each continuing the last"
        " checkpoint and its AdamW, run one way and then the other. Overhead: a step's wall"
        " time less the optimizer's own work (starting the process, imports, loading model and"
        " optimizer, saving the checkpoint); the kept trainer pays its start at step 1 only."
        " A kept trainer writes AdamW's state after handing back the weights, and the next step"
        " waits for that write: in a weight phase the write overlaps the next step's sampling"
        " (2,048 rollouts), here the steps follow each other at once, so the wait is counted"
        f" and shown apart. {figures.get('note', '')}"
    )
    title = "Per-step training overhead: a process per step against one kept for the phase"
    title += " (GPU)" if "no GPU" not in figures["measured"] else " (CPU)"
    report(title, body, notes, replace=True, where=f"{figures['measured']}; {figures['commit']}")


if __name__ == "__main__":
    main()
