"""Runs side by side: how good each got on the test split, and how many rollouts it took."""

from sqlalchemy import func
from sqlmodel import Session, select

from app.db.schema import Metric, Phase, Run
from app.phases import TEST_SERIES
from app.report.runs import get_runs


def test_points(session: Session, run_id: int) -> list[Metric]:
    """The run's test evaluations in the order they were recorded."""
    query = select(Metric).where(Metric.run_id == run_id, Metric.series == TEST_SERIES)
    return list(session.exec(query.order_by(Metric.id)))


def test_k(run: Run) -> int | None:
    """The k of the run's test mean@k: experiments keep it in their parsed config, `whale
    train` runs as test_k."""
    config = run.config or {}
    test = (config.get("experiment") or {}).get("test") or {}
    return test.get("k") or config.get("test_k")


def rollouts_used(session: Session, run_id: int) -> int:
    """Rollouts the run used: its metrics count them as it goes, its phases when they end; a
    run may have only one of the two (older runs have no phases), so take the larger."""
    by_metrics = session.exec(select(func.max(Metric.rollouts)).where(Metric.run_id == run_id))
    by_phases = session.exec(select(func.sum(Phase.rollouts)).where(Phase.run_id == run_id))
    return max(by_metrics.one() or 0, by_phases.one() or 0)


def summarize(session: Session, run: Run) -> dict:
    points = test_points(session, run.id)
    best = max(points, key=lambda p: p.y, default=None)  # max keeps the first of equals
    return {
        "id": run.id,
        "name": run.name,
        "strategy": run.strategy or run.kind,
        "status": run.status,
        "k": test_k(run),
        "best": best.y if best else None,
        "rollouts_to_best": best.rollouts if best else None,
        "final": points[-1].y if points else None,
        "rollouts_used": rollouts_used(session, run.id),
        "test_points": len(points),
    }


def compare_runs(session: Session, run_ids: list[int]) -> list[dict]:
    """One summary per run, in the order given; raises UnknownRuns for ids not in the store."""
    return [summarize(session, run) for run in get_runs(session, run_ids)]
