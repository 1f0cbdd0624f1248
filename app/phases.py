"""Phase rows, shared by both phase kinds (app/training/weight_phase.py, app/search/harness_phase.py), the loop
and the views: closing a phase, counting the rollouts it used, plotting a test point, and
closing what a run leaves open when it stops or fails."""

from sqlalchemy import delete
from sqlmodel import col, select

from app.db.schema import (
    Evaluation,
    Event,
    Metric,
    Phase,
    Rollout,
    SearchIteration,
    Step,
    TrainingJob,
    now,
)
from app.rollout.usage import spent

TEST_SERIES = "test/mean@k"  # the metric series of the run's curve


def phase_rollouts(s, phase_id: int) -> int:
    """Finished non-test rollouts of the phase's evaluations (see app/rollout/usage.py)."""
    return spent(s, Evaluation.phase_id == phase_id)[0]


def end_phase(s, phase_id: int, reason: str, **outs) -> Phase:
    """Close a phase of either kind: why it ended, what it handed on, the rollouts it used."""
    phase = s.get(Phase, phase_id)
    for key, value in outs.items():
        setattr(phase, key, value)
    phase.status, phase.ended_reason = "done", reason
    phase.finished_at = phase.finished_at or now()
    phase.rollouts = phase_rollouts(s, phase_id)
    detail = {"phase_id": phase_id, "kind": phase.kind, "round": phase.round, "reason": reason}
    s.add(Event(run_id=phase.run_id, kind="phase_end", detail=detail))
    return phase


def plot_test_point(s, run_id: int, evaluation, rollouts: int, steps: int, wall_s: float) -> None:
    """The point (rollouts used, test mean@k) of the run's curve, also at x = RFT steps and wall
    time; one per evaluation and rollout count (a resumed loop does not plot a point twice)."""
    exists = s.exec(
        select(Metric.id).where(Metric.evaluation_id == evaluation.id, Metric.rollouts == rollouts)
    ).first()
    if exists is None:
        s.add(
            Metric(
                run_id=run_id,
                series=TEST_SERIES,
                x=steps,
                rollouts=rollouts,
                y=evaluation.mean_at_k,
                evaluation_id=evaluation.id,
                weight_steps=steps,
                wall_s=wall_s,
            )
        )


def close_open_work(s, run_id: int, status: str, reason: str) -> None:
    """A run that stops or fails leaves nothing running (docs/faults.md, "nothing left
    running"): the rollouts that never started are dropped, their evaluations marked
    `stopped` (what finished is kept and counted), the running phase ends with the reason,
    an unfinished training job or search iteration fails with it."""
    open_evaluations = s.exec(
        select(Evaluation).where(Evaluation.run_id == run_id, Evaluation.status == "running")
    ).all()
    for evaluation in open_evaluations:
        never = select(Rollout.id).where(
            Rollout.evaluation_id == evaluation.id, Rollout.status == "pending"
        )
        s.exec(delete(Step).where(col(Step.rollout_id).in_(never)))
        s.exec(delete(Rollout).where(col(Rollout.id).in_(never)))
        evaluation.status, evaluation.finished_at = "stopped", now()
    jobs = s.exec(
        select(TrainingJob).where(
            TrainingJob.run_id == run_id, col(TrainingJob.status).in_(("sampling", "training"))
        )
    ).all()
    why = f"the run {status}: {reason}"
    for job in jobs:
        job.status, job.error, job.finished_at = "failed", why, now()
    iterations = s.exec(
        select(SearchIteration).where(
            SearchIteration.run_id == run_id, SearchIteration.status == "running"
        )
    ).all()
    for iteration in iterations:
        iteration.status, iteration.error = "failed", why
    for phase in s.exec(select(Phase).where(Phase.run_id == run_id, Phase.status == "running")):
        end_phase(s, phase.id, "stopped" if status == "stopped" else "failed", **_kept(s, phase))


def _kept(s, phase: Phase) -> dict:
    """What a weight phase cut short hands on: the checkpoint of its last finished step, the
    one its table shows (the run's summary names it as what the run ended with)."""
    if phase.kind != "weight":
        return {}
    last = s.exec(
        select(TrainingJob.checkpoint_out_id)
        .where(
            TrainingJob.phase_id == phase.id,
            TrainingJob.status == "done",
            col(TrainingJob.checkpoint_out_id).is_not(None),
        )
        .order_by(col(TrainingJob.id).desc())
        .limit(1)
    ).first()
    if last is None:
        return {}
    return {"checkpoint_out_id": last, "harness_out_id": phase.harness_in_id}
