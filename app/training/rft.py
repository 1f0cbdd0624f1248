"""One online RFT step, end to end (docs/algorithm.md, "Weight phase"):

1. sample: `samples_per_prompt` rollouts for each of `prompts_per_step` train-split prompts,
   through the current harness and checkpoint, in the sandbox (the evaluation path: every trace
   is recorded and browsable);
2. accept: rollouts scoring above `threshold`; none accepted -> the step is skipped;
3. train: every model call of the accepted rollouts is trained, on the token ids the model
   sampled where the server returned them (a rollout whose calls extend each other is one
   example), else rendered (app/training/examples.py); one pass in a separate process
   (mini-batches of `batch_size` examples, or of the examples of `batch_size` rollouts:
   `batch_unit`);
4. register the new checkpoint with its parent and job, and make it servable (hot-load).
"""

import asyncio
import json
import logging
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import delete
from sqlmodel import select

from app import control
from app.db.schema import (
    Checkpoint,
    Evaluation,
    Event,
    Harness,
    Metric,
    Rollout,
    Run,
    TrainingJob,
    now,
)
from app.domains import Domain, Task
from app.experiment_schema import RFTConfig
from app.llm.generation import Declared, declared_by, generation_for
from app.rollout.evaluate import RunStopped
from app.rollout.usage import usage
from app.training.examples import examples_from_rollouts
from app.training.job import OPTIMIZER_FILE, Trainer, TrainingError, trainer_command

if TYPE_CHECKING:
    from app.workbench import Workbench

log = logging.getLogger(__name__)
TRAINING_TRIES = 2  # a training process that fails is started once more, then the run pauses
NO_SPACE = "No space left on device"  # how Python's and safetensors' ENOSPC both read
RESUME_POLL_S = 1.0  # how often a training that paused its run looks for the resume


async def pause_until_resumed(workbench: "Workbench", run_id: int, reason: str) -> bool:
    """Ask the run to pause, saying why, and wait until it is resumed (True: go on) or stopped
    (RunStopped). False when nothing can pause it (a single `whale train`, not a loop): then
    the caller fails instead."""
    log.error("%s; the run pauses until it is resumed", reason)
    try:
        await control.apply(workbench.writer, run_id, "pause", reason, source="loop")
    except control.Refused:
        pass  # already paused or stopping (the run's log records the refusal), or no loop
    waited = False
    while True:
        with workbench.session() as s:
            desired = s.get(Run, run_id).desired
        if desired == "stopped":
            raise RunStopped()
        if desired != "paused":
            return waited
        waited = True
        await asyncio.sleep(RESUME_POLL_S)


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The train split's order in one epoch: a fresh shuffle per epoch from the seed, so no run
    trains on the file's order, and a resumed run draws the same prompts again."""
    order = list(range(n))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def prompt_batch(domain: Domain, cfg: RFTConfig, step: int) -> list[Task]:
    """The step's prompts: the next `prompts_per_step` of the shuffled train split, every task
    once per epoch before any comes again."""
    tasks = domain.tasks("train")
    first = step * cfg.prompts_per_step
    positions = [first + i for i in range(cfg.prompts_per_step)]
    orders = {e: epoch_order(len(tasks), cfg.seed, e) for e in {p // len(tasks) for p in positions}}
    return [tasks[orders[p // len(tasks)][p % len(tasks)]] for p in positions]


async def rft_step(
    workbench: "Workbench",
    run_id: int,
    harness: Harness,
    checkpoint: Checkpoint,
    domain: Domain,
    cfg: RFTConfig,
    step: int,
    progress: Callable[[str, dict], None] | None = None,
    phase_id: int | None = None,
    job: TrainingJob | None = None,
    trainer: Trainer | None = None,
) -> tuple[TrainingJob, Checkpoint]:
    """Run one RFT step; returns the job and the checkpoint to continue from (new or same).
    `trainer`: the weight phase's kept training process (without one, the step starts and ends
    a process of its own).

    Given an unfinished `job` (a run resumed after a crash), it goes on from where the job was:
    the sampling's recorded rollouts are kept and only the missing ones run; an interrupted
    training starts again from the accepted rollouts."""
    say = progress or (lambda kind, data: None)
    job = await _open_job(workbench, run_id, harness, checkpoint, cfg, step, phase_id, job)
    laps = StepLaps(job.timings)

    # 1. sample and 2. accept (a resumed job past them keeps what they recorded)
    if job.status == "sampling":
        job = await _sample_and_accept(workbench, job, harness, checkpoint, domain, cfg, say, laps)
    with workbench.session() as s:
        examples = _accepted_examples(s, job.evaluation_id, cfg.threshold)
        rollouts_used = usage(s, run_id).rollouts
    laps.lap("scoring_s")
    job = await workbench.writer.run(lambda s: _update(s, job.id, timings=dict(laps.timings)))
    say(
        "accepted", {"accepted": job.n_accepted, "total": job.n_rollouts, "examples": len(examples)}
    )
    if job.status != "training":  # skipped: nothing accepted
        return job, checkpoint
    _stop_if_asked(workbench, run_id)  # a stop asked while it sampled: no training starts now

    # 3. train
    job_dir, out, spec, carried = _prepare_training(
        workbench, run_id, harness, checkpoint, job, cfg, examples
    )
    on_batch = _loss_recorder(workbench.writer, job, step, rollouts_used, say)
    laps.restart()
    result = await _train(workbench, job, spec, job_dir, out, on_batch, trainer)
    laps.lap("training_s")
    laps.split_training(result)

    # 4. register and serve
    laps.restart()
    name = await workbench.serve_checkpoint(out)
    laps.lap("sync_s")
    new_checkpoint = await workbench.writer.run(
        lambda s: _register(s, job, checkpoint, cfg, name, out, result, laps.timings)
    )
    if carried:  # the phase's optimizer now lives in the new checkpoint; a full fine-tune's
        carried.unlink(missing_ok=True)  # is twice the weights, so one copy is kept
    job = await workbench.writer.run(lambda s: s.get(TrainingJob, job.id))
    say(
        "trained",
        {"loss": result["loss"], "tokens": result["tokens"], "checkpoint": new_checkpoint},
    )
    return job, new_checkpoint


class StepLaps:
    """Where the step's time goes, shown on its page: a resumed job adds to what it recorded.
    Scoring is the accept pass; each rollout's verifier runs within its sampling."""

    def __init__(self, recorded: dict | None):
        self.timings = dict(recorded or {})
        self.restart()

    def restart(self) -> None:
        self.clock = time.monotonic()

    def lap(self, part: str) -> None:
        """Add the time since the last lap (or restart) to `part`."""
        self.timings[part] = round(self.timings.get(part, 0.0) + time.monotonic() - self.clock, 3)
        self.restart()

    def split_training(self, result: dict) -> None:
        """The trainer's own clock splits its step into training and writing the checkpoint;
        the rest of the try that succeeded is starting the process and loading the model (none
        when the phase's kept trainer already held it). Failed tries count as training."""
        saving_s, train_s = result["save_seconds"], result["train_seconds"]
        startup_s = max(0.0, result["wall_seconds"] - train_s - saving_s)
        timings = self.timings
        timings["training_s"] = round(timings["training_s"] - saving_s - startup_s, 3)
        timings["saving_s"] = round(timings.get("saving_s", 0.0) + saving_s, 3)
        timings["startup_s"] = round(timings.get("startup_s", 0.0) + startup_s, 3)


async def _open_job(
    workbench,
    run_id: int,
    harness: Harness,
    checkpoint: Checkpoint,
    cfg: RFTConfig,
    step: int,
    phase_id: int | None,
    job: TrainingJob | None,
) -> TrainingJob:
    """The step's job: a new one, or the unfinished one given, trained again if it failed."""
    writer = workbench.writer
    if job is None:
        job = await writer.insert(
            TrainingJob(
                run_id=run_id,
                harness_id=harness.id,
                checkpoint_in_id=checkpoint.id,
                step=step,
                config=cfg.model_dump(),
                phase_id=phase_id,
            )
        )
    if job.status == "failed":  # its run was paused on it and is resumed (after a restart)
        job = await writer.run(lambda s: _retrain(s, job.id))
    return job


async def _sample_and_accept(
    workbench,
    job: TrainingJob,
    harness: Harness,
    checkpoint: Checkpoint,
    domain: Domain,
    cfg: RFTConfig,
    say: Callable[[str, dict], None],
    laps: StepLaps,
) -> TrainingJob:
    """1. sample (the evaluation is named on the job before any rollout runs), then 2. accept."""
    evaluator = workbench.evaluator()
    evaluation = await _sampling(workbench, evaluator, job, harness, checkpoint, domain, cfg)
    evaluation = await evaluator.complete(
        evaluation, harness, checkpoint, domain, lambda r: say("rollout", {"rollout": r})
    )
    laps.lap("sampling_s")
    return await _accept(workbench, job, evaluation.id, cfg, job.step)


def _stop_if_asked(workbench, run_id: int) -> None:
    """RunStopped when a stop of the run was asked."""
    with workbench.session() as s:
        if s.get(Run, run_id).desired == "stopped":
            raise RunStopped()


def _prepare_training(
    workbench,
    run_id: int,
    harness: Harness,
    checkpoint: Checkpoint,
    job: TrainingJob,
    cfg: RFTConfig,
    examples: list[dict],
) -> tuple[Path, Path, dict, Path | None]:
    """The training's folder with its examples written, the checkpoint's folder, the trainer's
    spec, and the optimizer state it carries on from (None: a fresh one)."""
    job_dir = workbench.settings.home / "training" / f"job-{job.id}"
    job_dir.mkdir(parents=True, exist_ok=True)
    with open(job_dir / "examples.jsonl", "w") as f:
        for example in examples:
            f.write(json.dumps(example) + "\n")
    out = workbench.settings.home / "checkpoints" / f"run-{run_id}" / f"job-{job.id}"
    with workbench.session() as s:
        max_len = cfg.max_seq_len or _rollout_tokens(workbench, s.get(Run, run_id))
        max_len += cfg.max_seq_len_per_turn * harness_turns(s.get(Run, run_id), harness)
        carried = _carried_optimizer(s, checkpoint, job, cfg.optimizer_state)
    spec = _spec(workbench.base_model, checkpoint, cfg, job_dir / "examples.jsonl", out, max_len)
    spec["optimizer_in"] = str(carried) if carried else None
    return job_dir, out, spec, carried


def _loss_recorder(
    writer, job: TrainingJob, step: int, rollouts_used: int, say: Callable[[str, dict], None]
) -> Callable[[dict], None]:
    """What the trainer calls after each batch: its loss becomes a point of train/loss."""

    def on_batch(event: dict) -> None:
        writer.add(
            Metric(
                run_id=job.run_id,
                training_job_id=job.id,
                series="train/loss",
                x=step + event["batch"] / event["of"],
                rollouts=rollouts_used,
                y=event["loss"],
            )
        )
        say("batch", event)

    return on_batch


async def _clean_slate(writer, job_id: int, out: Path) -> None:
    """A training interrupted (a crash here, a killed process there) is retried cleanly:
    whatever it wrote goes first, its temporary folder too (app/training/train.py)."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(out.with_name(out.name + ".tmp"), ignore_errors=True)
    await writer.run(
        lambda s: s.exec(
            delete(Metric).where(Metric.training_job_id == job_id, Metric.series == "train/loss")
        )
    )


async def _train(
    workbench,
    job: TrainingJob,
    spec: dict,
    job_dir: Path,
    out: Path,
    on_batch: Callable[[dict], None],
    trainer: Trainer | None,
) -> dict:
    """3. train, in the phase's kept `trainer` or (None) a process of the step's own, until a
    try succeeds: its result, with the try's `wall_seconds`. The policy on a failed try is
    `_after_failed_try`'s."""
    own_trainer = trainer is None
    trainer = trainer or phase_trainer(workbench, job.run_id, job.phase_id)
    try:
        failed = 0
        while True:
            await _clean_slate(workbench.writer, job.id, out)
            try:
                # colocated, vLLM sleeps through each try, and is awake while a failed try's
                # run is paused (other work samples meanwhile)
                async with workbench.training_turn(trainer):
                    wall = time.monotonic()
                    result = await trainer.step(spec, job_dir, on_batch)
                    result["wall_seconds"] = time.monotonic() - wall
                return result
            except TrainingError as exc:
                failed = await _after_failed_try(workbench, job, out, exc, failed)
    finally:
        if own_trainer:
            await trainer.close()


async def _after_failed_try(
    workbench, job: TrainingJob, out: Path, exc: TrainingError, failed: int
) -> int:
    """The policy on a failed training process (killed, out of memory, crashed): try once more,
    logged; a second failure marks the job failed with its log tail and pauses the run, naming
    the job; `resume` trains it again (TRAINING_TRIES more tries) from the same accepted
    rollouts. A full disk is no failed try: the run pauses naming the path. Nothing to pause
    (a single `whale train`): the failure ends the step (`exc` is raised). docs/faults.md
    Returns the count of failed tries to go on with."""
    writer, run_id = workbench.writer, job.run_id
    error = str(exc)[-4000:]
    if NO_SPACE in error:
        await _clean_slate(writer, job.id, out)  # the half-written checkpoint goes, and its room
        reason = f"the disk is full: training job {job.id} could not write {out} ({NO_SPACE})"
        if await pause_until_resumed(workbench, run_id, reason):
            return failed
    failed += 1
    if failed < TRAINING_TRIES:
        log.warning("training job %s failed, trying again: %s", job.id, error[-300:])
        detail = {"job_id": job.id, "step": job.step, "attempt": failed, "error": error}
        await writer.insert(Event(run_id=run_id, kind="training_retry", detail=detail))
        return failed
    await writer.run(lambda s: _update(s, job.id, status="failed", error=error, finished_at=now()))
    reason = f"training job {job.id} failed {TRAINING_TRIES} times: {_gist(error)}"
    if not await pause_until_resumed(workbench, run_id, reason):
        raise exc
    await writer.run(lambda s: _retrain(s, job.id))
    return 0


def _register(
    s,
    job: TrainingJob,
    checkpoint: Checkpoint,
    cfg: RFTConfig,
    name: str,
    out: Path,
    result: dict,
    timings: dict,
) -> Checkpoint:
    """4. register: the new checkpoint, child of the one the step started from, and the job
    done with what its training reported."""
    new = Checkpoint(
        run_id=job.run_id,
        parent_id=checkpoint.id,
        kind="lora" if cfg.lora else "full",
        name=name,
        path=str(out),
        training_job_id=job.id,
        size_bytes=result["size_bytes"],
    )
    s.add(new)
    s.flush()
    _update(
        s,
        job.id,
        status="done",
        checkpoint_out_id=new.id,
        loss=result["loss"],
        tokens_trained=result["tokens"],
        n_truncated=result["truncated"],
        n_dropped=result["dropped"],
        n_from_ids=result["from_ids"],
        n_rendered=result["rendered"],
        n_drift=result["drift"],
        n_drift_checked=result["drift_checked"],
        max_seq_len=result["max_seq_len"],
        optimizer_carried=result["optimizer_continued"],
        timings=timings,
        finished_at=now(),
    )
    return new


async def _sampling(
    workbench: "Workbench",
    evaluator,
    job: TrainingJob,
    harness: Harness,
    checkpoint: Checkpoint,
    domain: Domain,
    cfg: RFTConfig,
) -> Evaluation:
    """The job's sampling evaluation: the one it names, or a new one it is made to name."""
    if job.evaluation_id is not None:
        with workbench.session() as s:
            return s.get(Evaluation, job.evaluation_id)
    evaluation = await evaluator.create(
        job.run_id,
        harness,
        checkpoint,
        domain,
        "train",
        cfg.samples_per_prompt,
        phase_id=job.phase_id,
        tasks=prompt_batch(domain, cfg, job.step),
    )
    await workbench.writer.run(lambda s: _update(s, job.id, evaluation_id=evaluation.id))
    return evaluation


async def _accept(
    workbench, job: TrainingJob, evaluation_id: int, cfg: RFTConfig, step: int
) -> TrainingJob:
    """2. accept: count what the sampling accepted; the job moves on to training, or is skipped."""
    with workbench.session() as s:
        # rollouts the infrastructure failed say nothing of the policy: not in the rates
        rewards = s.exec(
            select(Rollout.reward).where(
                Rollout.evaluation_id == evaluation_id, Rollout.status != "infra"
            )
        ).all()
        accepted = sum((r or 0.0) > cfg.threshold for r in rewards)
        n_examples = len(_accepted_examples(s, evaluation_id, cfg.threshold))
        rollouts_used = usage(s, job.run_id).rollouts
    mean_reward = sum(r or 0.0 for r in rewards) / len(rewards) if rewards else 0.0

    def record(s):
        s.add_all(
            [
                Metric(
                    run_id=job.run_id,
                    training_job_id=job.id,
                    series="train/accept_rate",
                    x=step,
                    rollouts=rollouts_used,
                    y=accepted / len(rewards) if rewards else 0.0,
                ),
                Metric(
                    run_id=job.run_id,
                    training_job_id=job.id,
                    series="train/mean_reward",
                    x=step,
                    rollouts=rollouts_used,
                    y=mean_reward,
                ),
            ]
        )
        return _update(
            s,
            job.id,
            n_rollouts=len(rewards),
            n_accepted=accepted,
            mean_reward=mean_reward,
            n_examples=n_examples,
            status="training" if accepted else "skipped",
            finished_at=None if accepted else now(),
        )

    return await workbench.writer.run(record)


def _accepted_examples(s, evaluation_id: int, threshold: float) -> list[dict]:
    accepted = s.exec(
        select(Rollout.id).where(Rollout.evaluation_id == evaluation_id, Rollout.reward > threshold)
    ).all()
    return examples_from_rollouts(s, list(accepted))


def _carried_optimizer(s, checkpoint: Checkpoint, job: TrainingJob, state: str) -> Path | None:
    """The optimizer state to continue from: the one saved with the checkpoint this step starts
    from, when `state` carries it that far. "phase": only from a step of the same weight phase
    (a phase's first step starts a fresh AdamW); "run": from any step, so a weight phase goes on
    with the optimizer of the checkpoint it starts from, as verl's resume reloads it with the
    weights; "step": never."""
    if state == "step" or checkpoint.training_job_id is None or checkpoint.path is None:
        return None
    made_by = s.get(TrainingJob, checkpoint.training_job_id)
    saved = Path(checkpoint.path) / OPTIMIZER_FILE
    same_phase = made_by is not None and made_by.phase_id == job.phase_id
    # the file may still be being written by the phase's trainer, which holds the same state
    # in memory (app/training/train.py); a trainer started afresh without it starts a new one
    return saved if same_phase or state == "run" else None


def harness_turns(run: Run, harness: Harness) -> int:
    """The turns a harness may take in this run: its declared MAX_TURNS within the run's
    [rollout] max_calls (the clamp), as the release resolves its response window."""
    from app.harness_code import declared_turns

    clamp = (declared_by(run.config).get("rollout") or {}).get("max_calls")
    turns = declared_turns(harness.code) or clamp or 0
    return min(turns, clamp) if clamp else turns


def _rollout_tokens(workbench: "Workbench", run: Run) -> int:
    """The default max_seq_len: a rollout's token budget, which no call of it can exceed."""
    limits = workbench.settings.rollout_limits()
    declared = Declared.of_config(run.config)
    return generation_for(declared, "train", workbench.backend_name, limits).max_tokens


def _spec(
    base: str, checkpoint: Checkpoint, cfg: RFTConfig, examples: Path, out: Path, max_len: int
) -> dict:
    """What the training process needs: it continues from `checkpoint`."""
    spec = {
        "base_model": base,
        "init_adapter": None,
        "examples": str(examples),
        "output": str(out),
        "lora": cfg.lora,
        "lora_rank": cfg.lora_rank,
        "lora_alpha": cfg.lora_alpha,
        "lora_targets": cfg.lora_targets,
        "lr": cfg.lr,
        "batch_size": cfg.batch_size,
        "batch_unit": cfg.batch_unit,
        "batch_scope": cfg.batch_scope,
        "micro_batch_size": cfg.micro_batch_size,
        "weight_decay": cfg.weight_decay,
        "epochs": cfg.epochs,
        "max_seq_len": max_len,
        "optimizer_state": cfg.optimizer_state,
        "seed": cfg.seed,
    }
    if checkpoint.kind == "lora":
        spec["init_adapter"] = str(Path(checkpoint.path) / "adapter")
    elif checkpoint.kind == "full":
        spec["base_model"] = str(Path(checkpoint.path) / "merged")
    return spec


def phase_trainer(workbench: "Workbench", run_id: int, phase_id: int | None) -> Trainer:
    """The training process of a weight phase, in its own folder under $WHALE_HOME/training."""
    settings = workbench.settings
    folder = settings.home / "training" / f"run-{run_id}-phase-{phase_id or 0}"
    command = trainer_command(settings.train_accelerate_config, settings.train_accelerate_args)
    return Trainer(folder, command, trainer_gpus(settings))


def trainer_gpus(settings) -> dict[str, str]:
    """The GPUs a launched vLLM leaves to the trainer (WHALE_VLLM_GPUS takes its own): the split
    of one host, checked before the run starts (app/fit.py)."""
    if not settings.vllm_gpus or settings.vllm_urls or settings.backend != "vllm":
        return {}
    from app.fit import gpu_list, this_machine

    count = len(this_machine(settings.home).gpus)
    rest = [i for i in range(count) if i not in gpu_list(settings.vllm_gpus, count)]
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, rest))}


def _gist(error: str) -> str:
    """A training error in one line: how the process ended, and the last line of its log when
    that says more than the command line (e.g. an exception's message)."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "no output"
    first, last = lines[0].rstrip(":"), lines[-1].strip()
    if last == lines[0] or last.startswith("$ "):
        return first
    return f"{first}: {last[:200]}"


def _retrain(s, job_id: int) -> TrainingJob:
    """A job whose training failed, trained again after its run was resumed."""
    return _update(s, job_id, status="training", error=None, finished_at=None)


def _update(s, job_id: int, **values) -> TrainingJob:
    job = s.get(TrainingJob, job_id)
    for key, value in values.items():
        setattr(job, key, value)
    return job
