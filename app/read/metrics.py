"""Metric series: the points of a run's curves (test mean@k, accept rate, loss, ...)."""

from typing import Any

from sqlmodel import Session, col, select

from app.db.schema import Metric


def series(
    s: Session, run_id: int, names: list[str], training_job_id: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Each named series of the run (of one job, if given) as points {x, y, rollouts}, in x order.

    Every name is a key of the result, an empty list when nothing was recorded yet.
    """
    query = (
        select(Metric.series, Metric.x, Metric.y, Metric.rollouts)
        .where(Metric.run_id == run_id, col(Metric.series).in_(names))  # the (run, series, x) index
        .order_by(Metric.series, Metric.x, Metric.id)
    )
    if training_job_id is not None:
        query = query.where(Metric.training_job_id == training_job_id)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for name, x, y, rollouts in s.exec(query):
        found[name].append({"x": x, "y": y, "rollouts": rollouts})
    return found
