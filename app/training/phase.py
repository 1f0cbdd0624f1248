"""A weight phase on its own (`whale train`): test mean@k before, RFT steps, test mean@k after.

The loop's scheduler alternates phases; this is the piece it calls for the weight side, and the
way to measure what RFT alone does.
"""

from collections.abc import Callable
from dataclasses import dataclass

from app.config import RFTConfig
from app.db.schema import Checkpoint, Evaluation, Harness, Metric, TrainingJob
from app.domains import Domain
from app.training.rft import rft_step


@dataclass
class PhaseResult:
    before: Evaluation
    after: Evaluation
    jobs: list[TrainingJob]
    checkpoint: Checkpoint

    @property
    def rollouts_used(self) -> int:
        return sum(job.n_rollouts for job in self.jobs)


async def test_point(
    workbench,
    run_id: int,
    harness: Harness,
    checkpoint: Checkpoint,
    domain: Domain,
    k: int,
    limit: int | None,
    x: float,
    rollouts: int,
    progress=None,
) -> Evaluation:
    """Evaluate on the test split and record the point (x, test mean@k) of the run's curve."""
    evaluation = await workbench.evaluator().evaluate(
        run_id, harness, checkpoint, domain, "test", k, limit, progress
    )
    workbench.writer.add(
        Metric(
            run_id=run_id,
            series="test/mean@k",
            x=x,
            rollouts=rollouts,
            y=evaluation.mean_at_k,
            evaluation_id=evaluation.id,
            weight_steps=int(x),
        )
    )
    return evaluation


async def weight_phase(
    workbench,
    run_id: int,
    harness: Harness,
    checkpoint: Checkpoint,
    domain: Domain,
    cfg: RFTConfig,
    test_k: int,
    test_limit: int | None,
    progress: Callable[[str, dict], None] | None = None,
) -> PhaseResult:
    say = progress or (lambda kind, data: None)
    on_rollout = lambda r: say("rollout", {"rollout": r})  # noqa: E731
    say("phase", {"what": f"test mean@{test_k} under {checkpoint.kind} checkpoint"})
    before = await test_point(
        workbench, run_id, harness, checkpoint, domain, test_k, test_limit, 0, 0, on_rollout
    )
    jobs = []
    for step in range(cfg.steps):
        say("phase", {"what": f"RFT step {step + 1}/{cfg.steps}"})
        job, checkpoint = await rft_step(
            workbench, run_id, harness, checkpoint, domain, cfg, step, progress
        )
        jobs.append(job)
    say("phase", {"what": f"test mean@{test_k} under the trained checkpoint"})
    used = sum(job.n_rollouts for job in jobs)
    after = await test_point(
        workbench,
        run_id,
        harness,
        checkpoint,
        domain,
        test_k,
        test_limit,
        cfg.steps,
        used,
        on_rollout,
    )
    return PhaseResult(before, after, jobs, checkpoint)
