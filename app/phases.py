"""Phase rows, shared by both phase kinds (app/training/weight_phase.py, app/search/harness_phase.py), the loop
and the views: closing a phase, counting the rollouts it used, plotting a test point."""

from sqlmodel import select

from app.db.schema import Evaluation, Event, Metric, Phase, now
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
