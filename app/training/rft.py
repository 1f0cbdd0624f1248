"""One online RFT step, end to end (reference/whale.md, "Weight phase"):

1. sample: `samples_per_prompt` rollouts for each of `prompts_per_step` train-split prompts,
   through the current harness and checkpoint, in the sandbox (the evaluation path: every trace
   is recorded and browsable);
2. accept: rollouts scoring above `threshold`; none accepted -> the step is skipped;
3. train: every model call of the accepted rollouts is an example; one pass in a separate process;
4. register the new checkpoint with its parent and job, and make it servable (hot-load).
"""
import json
import logging
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func
from sqlmodel import select

from app.config import RFTConfig
from app.db.schema import Checkpoint, Harness, Metric, Rollout, TrainingJob, now
from app.domains import Domain, Task
from app.training.examples import examples_from_rollouts
from app.training.job import TrainingError, run_trainer

log = logging.getLogger(__name__)


def prompt_batch(domain: Domain, cfg: RFTConfig, step: int) -> list[Task]:
    """The step's prompts: consecutive train-split tasks, wrapping around (epochs go by)."""
    tasks = domain.tasks("train")
    first = step * cfg.prompts_per_step
    return [tasks[(first + i) % len(tasks)] for i in range(cfg.prompts_per_step)]


async def rft_step(workbench, run_id: int, harness: Harness, checkpoint: Checkpoint,
                   domain: Domain, cfg: RFTConfig, step: int,
                   progress: Callable[[str, dict], None] | None = None,
                   ) -> tuple[TrainingJob, Checkpoint]:  # fmt: skip
    """Run one RFT step; returns the job and the checkpoint to continue from (new or same)."""
    writer = workbench.writer
    say = progress or (lambda kind, data: None)
    job = await writer.run(lambda s: _add(s, TrainingJob(
        run_id=run_id, harness_id=harness.id, checkpoint_in_id=checkpoint.id, step=step,
        config=cfg.model_dump())))  # fmt: skip

    # 1. sample
    evaluation = await workbench.evaluator().evaluate(
        run_id, harness, checkpoint, domain, "train", cfg.samples_per_prompt,
        tasks=prompt_batch(domain, cfg, step), progress=lambda r: say("rollout", {"rollout": r}),
    )  # fmt: skip
    # 2. accept
    with workbench.session() as s:
        rewards = s.exec(select(Rollout.id, Rollout.reward)
                         .where(Rollout.evaluation_id == evaluation.id)).all()  # fmt: skip
        accepted = [rid for rid, reward in rewards if (reward or 0.0) > cfg.threshold]
        examples = examples_from_rollouts(s, accepted)
        used_before = s.exec(select(func.coalesce(func.sum(TrainingJob.n_rollouts), 0))
                             .where(TrainingJob.run_id == run_id)).one()  # fmt: skip
    mean_reward = sum(r or 0.0 for _, r in rewards) / len(rewards)
    rollouts_used = used_before + len(rewards)
    job = await writer.run(lambda s: _update(s, job.id,
        evaluation_id=evaluation.id, n_rollouts=len(rewards), n_accepted=len(accepted),
        mean_reward=mean_reward, n_examples=len(examples),
        status="training" if accepted else "skipped"))  # fmt: skip
    writer.add(
        Metric(run_id=run_id, training_job_id=job.id, series="train/accept_rate", x=step,
               rollouts=rollouts_used, y=len(accepted) / len(rewards)),
        Metric(run_id=run_id, training_job_id=job.id, series="train/mean_reward", x=step,
               rollouts=rollouts_used, y=mean_reward),
    )  # fmt: skip
    say("accepted", {"accepted": len(accepted), "total": len(rewards), "examples": len(examples)})
    if not accepted:
        await writer.run(lambda s: _update(s, job.id, finished_at=now()))
        return job, checkpoint

    # 3. train
    job_dir = workbench.settings.home / "training" / f"job-{job.id}"
    job_dir.mkdir(parents=True, exist_ok=True)
    with open(job_dir / "examples.jsonl", "w") as f:
        for example in examples:
            f.write(json.dumps(example) + "\n")
    out = workbench.settings.home / "checkpoints" / f"run-{run_id}" / f"job-{job.id}"
    spec = _spec(workbench.base_model_path, checkpoint, cfg, job_dir / "examples.jsonl", out)

    def on_batch(event: dict) -> None:
        writer.add(Metric(run_id=run_id, training_job_id=job.id, series="train/loss",
                          x=step + event["batch"] / event["of"], rollouts=rollouts_used,
                          y=event["loss"]))  # fmt: skip
        say("batch", event)

    try:
        result = await run_trainer(spec, job_dir, on_batch)
    except TrainingError as exc:
        error = str(exc)[-4000:]
        await writer.run(lambda s: _update(s, job.id, status="failed", error=error,
                                           finished_at=now()))  # fmt: skip
        raise

    # 4. register and serve
    name = await workbench.serve_checkpoint(out)

    def register(s):
        new = Checkpoint(run_id=run_id, parent_id=checkpoint.id, kind="lora" if cfg.lora else "full",
                         name=name, path=str(out), training_job_id=job.id,
                         size_bytes=result["size_bytes"])  # fmt: skip
        s.add(new)
        s.flush()
        _update(s, job.id, status="done", checkpoint_out_id=new.id, loss=result["loss"],
                tokens_trained=result["tokens"], finished_at=now())
        return new

    new_checkpoint = await writer.run(register)
    job = await writer.run(lambda s: s.get(TrainingJob, job.id))
    say("trained", {"loss": result["loss"], "tokens": result["tokens"], "checkpoint": new_checkpoint})
    return job, new_checkpoint


def _spec(base: Path, checkpoint: Checkpoint, cfg: RFTConfig, examples: Path, out: Path) -> dict:
    """What the training process needs: it continues from `checkpoint`."""
    spec = {
        "base_model": str(base), "init_adapter": None, "examples": str(examples),
        "output": str(out), "lora": cfg.lora, "lora_rank": cfg.lora_rank,
        "lora_alpha": cfg.lora_alpha, "lora_targets": cfg.lora_targets, "lr": cfg.lr,
        "batch_size": cfg.batch_size, "epochs": cfg.epochs, "max_seq_len": cfg.max_seq_len,
        "seed": cfg.seed,
    }  # fmt: skip
    if checkpoint.kind == "lora":
        spec["init_adapter"] = str(Path(checkpoint.path) / "adapter")
    elif checkpoint.kind == "full":
        spec["base_model"] = str(Path(checkpoint.path) / "merged")
    return spec


def _add(s, row):
    s.add(row)
    s.flush()
    return row


def _update(s, job_id: int, **values) -> TrainingJob:
    job = s.get(TrainingJob, job_id)
    for key, value in values.items():
        setattr(job, key, value)
    return job
