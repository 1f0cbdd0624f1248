"""The training process: `python -m app.training SPEC.json` (one step) or
`python -m app.training --serve FOLDER` (every step of a weight phase, the model and optimizer
kept in memory between them), or either under `accelerate launch`.

Reads the spec (base model, optional adapter to continue from, examples file, hyperparameters,
output folder), makes one pass over the examples with token-mean negative log-likelihood on
completion tokens (no KL, no advantage, no clipping), saves the checkpoint and prints progress
as JSON lines on stdout: {"event": "batch", ...} per optimizer step, then {"event": "done", ...}.

A mini-batch (one optimizer step) holds `batch_size` examples (`batch_unit` "call": one model
call each) or every call of `batch_size` accepted rollouts ("rollout": the release's online RSFT,
whose SFT mini-batch counts whole multi-turn trajectories); its loss is the mean over all of its
trained tokens, as verl's token-mean. `micro_batch_size` splits each process's share of a
mini-batch into forward passes of that many rows, for memory only: the step is the same.

The loop goes through `accelerate.Accelerator`, so one plain process and an `accelerate launch`
of several (DDP, FSDP, DeepSpeed; GPUs or machines) run the same code: each process trains on its
shard of every batch, and only the main process prints progress and writes the checkpoint.

The checkpoint folder holds `adapter/` (LoRA: what vLLM hot-loads and the local server merges
into its base on load) or `merged/` (a full fine-tune's weights), each with the tokenizer, and,
when the weight phase carries one optimizer across its steps, `optimizer.pt`. It is written to a
temporary folder and renamed at the end, so a crash or a full disk never leaves a half checkpoint.
"""

import json
import math
import os
import random
import shutil
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator, DistributedType
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.children import die_with_parent
from app.training.examples import encode_all
from app.training.job import OPTIMIZER_FILE, SUPERVISED


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


def load_model(spec: dict, adapter: str | None = None):
    base = spec["base_model"]
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if not spec["lora"]:
        return model
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter:
        return PeftModel.from_pretrained(model, adapter, is_trainable=True)
    config = LoraConfig(
        r=spec["lora_rank"],
        lora_alpha=spec["lora_alpha"],
        target_modules=spec["lora_targets"],
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def collate(chunk: list, pad_id: int):
    """Right-padded input ids, attention mask and labels (-100: no loss) of one batch."""
    width = max(len(row[0]) for row in chunk)
    ids = torch.full((len(chunk), width), pad_id)
    labels = torch.full((len(chunk), width), -100)
    mask = torch.zeros((len(chunk), width), dtype=torch.long)
    for row, (x, y, *_) in enumerate(chunk):
        ids[row, : len(x)], labels[row, : len(y)], mask[row, : len(x)] = (
            torch.tensor(x),
            torch.tensor(y),
            1,
        )
    return ids, mask, labels


def with_fillers(encoded: list, step_size: int, pad_id: int) -> list:
    """`encoded` plus one-token rows without labels up to a multiple of `step_size`.

    Every process then gets as many rows, and forward passes, as the others (DDP and FSDP need
    each to take every step) and, unlike accelerate's own evening out, no example is trained on
    twice."""
    return encoded + [([pad_id], [-100], None)] * (-len(encoded) % step_size)


def mini_batches(encoded: list, batch_size: int, unit: str, seed: int) -> list[list]:
    """The optimizer steps of one pass, in a seeded shuffle (the same on every process).

    "call": `batch_size` examples per step. "rollout": the calls of `batch_size` rollouts per
    step, a rollout's calls always together and in their order (the release's SFT mini-batch is
    64 whole trajectories: ray_trainer._fit_online_rsft, dp_actor.update_sft_policy)."""
    rng = random.Random(seed)
    if unit == "call":
        rows = list(encoded)
        rng.shuffle(rows)
        return [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]
    if unit != "rollout":
        raise ValueError(f"batch_unit is 'call' or 'rollout', not {unit!r}")
    calls: dict = {}
    for row in encoded:  # an example without a rollout (a file of one's own) is one alone
        calls.setdefault(row[2] if row[2] is not None else object(), []).append(row)
    groups = list(calls.values())
    rng.shuffle(groups)
    return [
        [row for group in groups[i : i + batch_size] for row in group]
        for i in range(0, len(groups), batch_size)
    ]


def labelled(rows: list) -> int:
    """The trained tokens of these rows, as nll_sum counts them (a label after the first)."""
    return sum(sum(t != -100 for t in row[1][1:]) for row in rows)


def nll_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed NLL over the labelled tokens of the batch, and their number."""
    logits, labels = logits[:, :-1], labels[:, 1:]
    n = int((labels != -100).sum())
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),
        labels.reshape(-1),
        ignore_index=-100,
        reduction="sum",
    )
    return loss, n


def on_cpu() -> bool:
    """Whether to train on the CPU: a plain process does, as it always has (a GPU on this machine
    is usually the model server's); one started by `accelerate launch` (which sets
    ACCELERATE_MIXED_PRECISION) trains where its config says, and on a machine without a GPU
    on the CPU, DDP over gloo, since the multi-process launcher does not pass `use_cpu` on."""
    if "ACCELERATE_MIXED_PRECISION" not in os.environ:
        return True
    return not torch.accelerator.is_available()


class TrainerState:
    """What a training process keeps between the steps of a weight phase: the accelerator, and
    the model, tokenizer and optimizer exactly as it saved them last (`holds`: that checkpoint's
    weights folder). A step that continues from that checkpoint trains on them in memory; any
    other step loads its start from disk, as a new process would. Under FSDP or DeepSpeed the
    model and optimizer are wrapped together, so every step loads them afresh."""

    def __init__(self):
        self.accelerator = Accelerator(cpu=on_cpu())
        self.model = self.optimizer = self.tokenizer = None
        self.holds: str | None = None
        self.writing: threading.Thread | None = None  # the last step's optimizer.pt, if any

    def finish_writing(self) -> None:
        """Wait for the optimizer state the last step is writing (before it changes again)."""
        if self.writing is not None:
            self.writing.join()
            self.writing = None

    def _reusable(self, spec: dict) -> bool:
        sharded = self.accelerator.distributed_type in (
            DistributedType.FSDP,
            DistributedType.DEEPSPEED,
        )
        return self.model is not None and not sharded and self.holds == starting_weights(spec)

    def _load(self, spec: dict) -> None:
        """The step's start from disk: the model, and a new AdamW (the saved state goes in later)."""
        accelerator = self.accelerator
        self.model = self.optimizer = None
        self.holds = None
        accelerator.free_memory()  # the previous model and optimizer go before the next comes
        self.tokenizer = AutoTokenizer.from_pretrained(spec["base_model"])
        model = load_model(spec, spec.get("init_adapter"))
        model.train()
        self.model, self.optimizer = accelerator.prepare(model, new_optimizer(model, spec))

    def step(self, spec: dict) -> dict | None:
        """Train one pass over the spec's examples and save; returns the "done" event on the
        main process, None on the others."""
        accelerator, asked = self.accelerator, time.monotonic()
        self.finish_writing()
        started = time.monotonic()
        torch.manual_seed(spec["seed"])  # a step trains alike in a new process or a kept one
        carried = carry_optimizer(accelerator, spec)
        wanted = carried and spec.get("optimizer_in")  # continue where the last step left it
        reused = self._reusable(spec)
        continued = self._begin(spec, bool(wanted), reused)
        model, optimizer, tokenizer = self.model, self.optimizer, self.tokenizer
        load_seconds = time.monotonic() - started
        examples = [json.loads(line) for line in open(spec["examples"])]
        encoded, cut = encode_all(tokenizer, examples, spec["max_seq_len"])
        steps = self._mini_batches(spec, encoded)
        start = time.monotonic()
        losses, tokens, done = self._train_pass(spec, steps, start)
        train_seconds = time.monotonic() - start
        save(accelerator, model, tokenizer, spec)
        self.holds = trained_weights(spec)
        if not accelerator.is_main_process:
            return None
        # measured before the optimizer's write starts: the checkpoint's own size, never a
        # half-written optimizer.pt.tmp (nor one renamed away mid-walk)
        size = sum(p.stat().st_size for p in Path(spec["output"]).rglob("*") if p.is_file())
        if carried:
            # AdamW's state (twice the weights) is written while the workbench samples the next
            # step, which waits for it (finish_writing) before training changes it
            self.writing = write_optimizer(optimizer, Path(spec["output"]))
        return {
            "event": "done",
            "loss": sum(losses) / len(losses) if losses else None,
            "tokens": tokens,
            "batches": done,
            "examples": len(encoded),
            "truncated": cut["truncated"],  # longer than max_seq_len, trained on their first part
            "dropped": cut["dropped"],  # nothing trainable left within max_seq_len
            # made of the ids the model sampled, or rendered; calls whose rendering drifts
            **{k: cut[k] for k in ("from_ids", "rendered", "drift", "drift_checked")},
            "max_seq_len": spec["max_seq_len"],
            "optimizer_carried": carried,  # saved for the next step
            "optimizer_continued": continued,  # this step went on with the last one's
            "size_bytes": size,
            "processes": accelerator.num_processes,
            "kept_loaded": reused,  # trained on what the process held, nothing read from disk
            "optimizer_wait_seconds": started - asked,  # the last step's state still writing
            "load_seconds": load_seconds,
            "train_seconds": train_seconds,
            "save_seconds": time.monotonic() - start - train_seconds,
            "seconds": time.monotonic() - asked,
        }

    def _begin(self, spec: dict, wanted: bool, reused: bool) -> bool:
        """The step's model and optimizer: the ones held (`reused`) or loaded from disk, and the
        optimizer's state the last step's when `wanted`; returns whether it continues it."""
        if not reused:
            self._load(spec)
            # a process killed while writing the last step's state left none: a fresh AdamW,
            # and the job says so (optimizer "fresh")
            continued = wanted and Path(spec["optimizer_in"]).is_file()
            if continued:
                self.optimizer.load_state_dict(torch.load(spec["optimizer_in"], weights_only=True))
            return continued
        # the optimizer in memory is the saved one: kept, or emptied for a fresh start
        inner = getattr(self.optimizer, "optimizer", self.optimizer)  # accelerate's wrapper
        if not wanted:  # emptied in place: a new object would stay the accelerator's too
            inner.state.clear()
        for group in inner.param_groups:  # only the settings may differ
            group["lr"], group["weight_decay"] = spec["lr"], spec.get("weight_decay", 0.0)
        return wanted

    def _mini_batches(self, spec: dict, encoded: list) -> list[list]:
        """The optimizer steps of one epoch, each a mini-batch of encoded rows."""
        processes = self.accelerator.num_processes
        # batch_size counts the examples (or rollouts) of one optimizer step over all processes,
        # or of each process's share under batch_scope "rank" (verl's per-rank mini-batch)
        per_step = spec["batch_size"] * (processes if spec.get("batch_scope") == "rank" else 1)
        steps = mini_batches(encoded, per_step, spec.get("batch_unit", "call"), spec["seed"])
        micro = spec.get("micro_batch_size")
        if micro and self.accelerator.distributed_type == DistributedType.DEEPSPEED:
            # accelerate steps a DeepSpeed engine at every backward: no accumulation here
            raise ValueError("micro_batch_size is not supported under DeepSpeed")
        return steps

    def _train_pass(self, spec: dict, steps: list[list], start: float) -> tuple[list, int, int]:
        """Every epoch over the mini-batches, one optimizer step each, each reported as a
        "batch" event; returns the steps' losses, the tokens trained and the steps taken."""
        accelerator, model, optimizer = self.accelerator, self.model, self.optimizer
        pad = pad_id(self.tokenizer)
        total_batches = spec["epochs"] * len(steps)
        losses, tokens, done = [], 0, 0
        for _ in range(spec["epochs"]):
            for step in steps:
                all_n = labelled(step)  # every process knows the whole step: no exchange needed
                total = self._backward(step, all_n, spec.get("micro_batch_size"), pad)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                done += 1
                tokens += all_n
                losses.append(total.item() / max(all_n, 1))
                if accelerator.is_main_process:
                    emit(
                        event="batch",
                        batch=done,
                        of=total_batches,
                        loss=losses[-1],
                        tokens=all_n,
                        tokens_per_s=tokens / (time.monotonic() - start),
                    )
        return losses, tokens, done

    def _backward(self, step: list, all_n: int, micro: int | None, pad: int) -> torch.Tensor:
        """This process's share of one mini-batch, forward and backward in micro-batches (of
        `micro` rows; None: all at once); returns the mini-batch's summed NLL over every
        process."""
        accelerator = self.accelerator
        processes, rank = accelerator.num_processes, accelerator.process_index
        # this process's share of the step: as many rows as every other process
        share = math.ceil(len(step) / processes)
        mine = with_fillers(step, share * processes, pad)[rank * share : (rank + 1) * share]
        nll = torch.zeros((), device=accelerator.device)
        for i in range(0, share, micro or share):
            ids, mask, labels = (
                t.to(accelerator.device) for t in collate(mine[i : i + (micro or share)], pad)
            )
            logits = self.model(input_ids=ids, attention_mask=mask).logits
            loss, _ = nll_sum(logits, labels)
            # Gradients are averaged over the processes and summed over the forward passes;
            # scaled like this, the step follows the token mean over the whole mini-batch.
            accelerator.backward(loss * processes / max(all_n, 1))
            nll += loss.detach().float()
        return accelerator.reduce(nll, reduction="sum")


def pad_id(tokenizer) -> int:
    """The id that pads a batch's rows: the tokenizer's pad token, else its end of sequence."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def starting_weights(spec: dict) -> str:
    """What a step starts from, named as `trained_weights` names what a step saved."""
    if spec["lora"]:
        return spec.get("init_adapter") or f"base:{spec['base_model']}"
    return spec["base_model"]


def trained_weights(spec: dict) -> str:
    """The weights folder a step saves, which the next step names as its start."""
    return str(Path(spec["output"]) / ("adapter" if spec["lora"] else "merged"))


def new_optimizer(model, spec: dict) -> torch.optim.Optimizer:
    # AdamW over every trainable weight, as verl's FSDP actor (its default weight_decay: 0.01)
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=spec["lr"], weight_decay=spec.get("weight_decay", 0.0))


def carry_optimizer(accelerator: Accelerator, spec: dict) -> bool:
    """Whether this step continues an optimizer and saves it for the next step
    (`[rft] optimizer_state` "phase" or "run"). Under FSDP or DeepSpeed each process holds a
    shard of it: those start a fresh AdamW per step, and the job says so."""
    sharded = accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)
    return spec.get("optimizer_state", "step") in ("phase", "run") and not sharded


def save(accelerator: Accelerator, model, tokenizer, spec: dict) -> None:
    """Write the checkpoint's weights from the main process, atomically (a temporary folder,
    renamed).

    get_state_dict gathers FSDP- or ZeRO-sharded weights into full tensors; every process must
    take part in it: under sharding the trained model holds only its shard of the weights."""
    state = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        out = Path(spec["output"])
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        trained = accelerator.unwrap_model(model)
        # a LoRA checkpoint is its adapter (served merged on load, app/llm/local_server.py); a
        # merged copy on disk would be the whole model again at every step
        weights = tmp / ("adapter" if spec["lora"] else "merged")
        trained.save_pretrained(weights, state_dict=state)
        tokenizer.save_pretrained(weights)
        tmp.rename(out)
    accelerator.wait_for_everyone()


def write_optimizer(optimizer, checkpoint: Path) -> threading.Thread:
    """Write the optimizer's state into the checkpoint as `optimizer.pt`, in a thread, through a
    temporary file renamed at the end: a process killed meanwhile leaves no half state."""

    def write() -> None:
        tmp = checkpoint / (OPTIMIZER_FILE + ".tmp")
        torch.save(optimizer.state_dict(), tmp)
        tmp.rename(checkpoint / OPTIMIZER_FILE)

    thread = threading.Thread(target=write, name="optimizer-writer")
    thread.start()
    return thread


INBOX_POLL_S = 0.05  # how often a kept trainer looks for its next step


def serve(folder: Path) -> None:
    """Train the steps the workbench writes to FOLDER/inbox as 000001.json, 000002.json, ...
    (each a spec, or {"stop": true}), one at a time, keeping what TrainerState keeps. Every
    process of an `accelerate launch` reads the same files: no collective waits while the
    workbench samples, which takes longer than a collective's timeout."""
    state, n = TrainerState(), 1
    while True:
        path = folder / "inbox" / f"{n:06d}.json"
        while not path.exists():
            time.sleep(INBOX_POLL_S)
        spec = json.loads(path.read_text())
        if spec.get("stop"):
            break
        done = state.step(spec)
        if done is not None:
            emit(**done, request=n)
        n += 1
    state.finish_writing()
    state.accelerator.end_training()


def main(argv: list[str]) -> int:
    """`python -m app.training SPEC.json`: one step; `python -m app.training --serve FOLDER`: a
    trainer kept up for a weight phase (app/training/job.py)."""
    if os.environ.get(SUPERVISED):
        die_with_parent()
    if argv[1] == "--serve":
        serve(Path(argv[2]))
        return 0
    state = TrainerState()
    done = state.step(json.loads(Path(argv[1]).read_text()))
    state.finish_writing()
    state.accelerator.end_training()
    if done is not None:
        emit(**done)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
