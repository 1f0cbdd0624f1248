"""One weight phase (docs/algorithm.md, "Weight phase"): online RFT steps under the phase's
harness until the caller's end rule names a reason, resumable after a crash. The loop
(app/loop/driver.py) calls `weight_phase` with the experiment's switching rule and budgets, as
it calls app/search/harness_phase.py's `harness_phase` for the other side; `train_file` is the same
phase on its own (`whale train`), between two test points.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlmodel import select

from app.db.schema import Checkpoint, Evaluation, Harness, Phase, TrainingJob, utc
from app.domains import Domain
from app.experiment_schema import RFTConfig
from app.phases import end_phase, plot_test_point
from app.rollout.usage import weight_steps_done
from app.runs import single_run
from app.training.retention import retain
from app.training.rft import phase_trainer, rft_step

if TYPE_CHECKING:
    from app.workbench import Workbench

# The end rule: given the mean rewards of the phase's finished steps, why the phase ends now, or
# None to run one more step.
EndCheck = Callable[[list[float]], Awaitable[str | None]]


def phase_jobs(workbench: "Workbench", phase_id: int) -> list[TrainingJob]:
    with workbench.session() as s:
        query = select(TrainingJob).where(TrainingJob.phase_id == phase_id)
        return list(s.exec(query.order_by(TrainingJob.id)))


def steps_done(workbench: "Workbench", run_id: int) -> int:
    with workbench.session() as s:
        return weight_steps_done(s, run_id)


async def weight_phase(
    workbench: "Workbench",
    phase: Phase,
    harness: Harness,
    checkpoint: Checkpoint,
    domain: Domain,
    cfg: RFTConfig,
    end_check: EndCheck,
    after_step: Callable[[Checkpoint], Awaitable[None]] | None = None,
    progress: Callable[[str, dict], None] | None = None,
) -> Phase:
    """Run the phase's RFT steps and close it; returns the closed phase. A step a crash left
    unfinished is finished first (its sampling is not repeated), then new steps run while
    `end_check` says go on; `after_step` sees each step's checkpoint (e.g. for a test point)."""
    jobs = phase_jobs(workbench, phase.id)
    # a failed job in a running phase paused its run (app/training/rft.py) and trains again
    unfinished = next((j for j in jobs if j.status in ("sampling", "training", "failed")), None)
    done = [j.checkpoint_out_id for j in jobs if j.checkpoint_out_id]
    with workbench.session() as s:
        start = unfinished.checkpoint_in_id if unfinished else (done[-1] if done else checkpoint.id)
        checkpoint = s.get(Checkpoint, start)
    # One training process for the phase, the model and optimizer kept between its steps
    # (app/training/job.py); it ends with the phase, and a crash of it costs one reload.
    trainer = phase_trainer(workbench, phase.run_id, phase.id)
    try:
        while True:
            if unfinished is None:
                finished = phase_jobs(workbench, phase.id)
                rewards = [
                    j.mean_reward or 0.0 for j in finished if j.status in ("done", "skipped")
                ]
                reason = await end_check(rewards)
                if reason:
                    break
            step = unfinished.step if unfinished else steps_done(workbench, phase.run_id)
            _, checkpoint = await rft_step(
                workbench,
                phase.run_id,
                harness,
                checkpoint,
                domain,
                cfg,
                step,
                progress,
                phase.id,
                job=unfinished,
                trainer=trainer,
            )
            unfinished = None
            if after_step:
                await after_step(checkpoint)
            # after the step's test point, so a checkpoint evaluated on test keeps its weights
            await retain(workbench, phase.run_id, cfg)
    finally:
        await trainer.close()
    return await workbench.writer.run(
        lambda s: end_phase(
            s, phase.id, reason, checkpoint_out_id=checkpoint.id, harness_out_id=harness.id
        )
    )


@dataclass
class PhaseResult:
    before: Evaluation
    after: Evaluation
    jobs: list[TrainingJob]
    checkpoint: Checkpoint

    @property
    def rollouts_used(self) -> int:
        return sum(job.n_rollouts for job in self.jobs)


async def train_file(
    workbench: "Workbench",
    harness_path: Path,
    domain: Domain,
    cfg: RFTConfig,
    steps: int,
    test_k: int,
    test_limit: int | None,
    progress: Callable[[str, dict], None] | None = None,
) -> tuple[int, PhaseResult]:
    """`whale train`: a run of kind "rft" holding one weight phase of `steps` RFT steps, with a
    test point (mean@k, plotted like the loop's) before and after; returns (run id, result)."""
    say = progress or (lambda kind, data: None)
    config = {
        "harness": str(harness_path),
        "rft": cfg.model_dump(),
        "steps": steps,
        "test_k": test_k,
        "test_limit": test_limit,
    }
    name = f"rft {harness_path.name}"
    async with single_run(
        workbench, name, "rft", domain.name, harness_path, config, "weight"
    ) as made:
        run, harness, base, phase = made.run, made.harness, made.checkpoint, made.phase

        async def test_point(checkpoint: Checkpoint) -> Evaluation:
            say("phase", {"what": f"test mean@{test_k} under the {checkpoint.kind} checkpoint"})
            evaluation = await workbench.evaluator().evaluate(
                run.id,
                harness,
                checkpoint,
                domain,
                "test",
                test_k,
                test_limit,
                lambda r: say("rollout", {"rollout": r}),
            )
            used = sum(j.n_rollouts for j in phase_jobs(workbench, phase.id))
            done = steps_done(workbench, run.id)
            wall_s = (utc(evaluation.finished_at) - utc(run.created_at)).total_seconds()
            await workbench.writer.run(
                lambda s: plot_test_point(s, run.id, evaluation, used, done, wall_s)
            )
            return evaluation

        async def fixed_steps(rewards: list[float]) -> str | None:
            if len(rewards) >= steps:
                return "fixed"
            say("phase", {"what": f"RFT step {len(rewards) + 1}/{steps}"})
            return None

        before = await test_point(base)
        phase = await weight_phase(
            workbench, phase, harness, base, domain, cfg, fixed_steps, progress=progress
        )
        with workbench.session() as s:
            trained = s.get(Checkpoint, phase.checkpoint_out_id)
        after = await test_point(trained)
    return run.id, PhaseResult(before, after, phase_jobs(workbench, phase.id), trained)
