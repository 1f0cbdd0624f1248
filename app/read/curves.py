"""A run's test curve: its test mean@k points against the x axis the reader picks (rollouts
used, RFT steps, wall time), with the labels every rendering (page, JSON, PNG) shares."""

from sqlmodel import Session, col, select

from app.db.schema import Evaluation, Metric, Run
from app.phases import TEST_SERIES

X_LABELS = {
    "rollouts": "rollouts used (training + harness search)",
    "weight_steps": "RFT steps",
    "wall_s": "wall-clock time",
}
LABEL_CHARS = 44


def test_points(session: Session, run_id: int) -> list[Metric]:
    """The run's test evaluations in the order they were recorded."""
    query = select(Metric).where(Metric.run_id == run_id, Metric.series == TEST_SERIES)
    return list(session.exec(query.order_by(Metric.id)))


def x_value(point: Metric, x: str) -> float | None:
    if x == "weight_steps" and point.weight_steps is None:
        return point.x  # runs from before the loop: x counted the RFT steps
    return getattr(point, x)


def intervals(session: Session, points: list[Metric]) -> dict[int, tuple[float, float]]:
    """{evaluation id: its 95% interval} for the points whose evaluation has one."""
    ids = {p.evaluation_id for p in points if p.evaluation_id is not None}
    rows = session.exec(
        select(Evaluation.id, Evaluation.ci_low, Evaluation.ci_high).where(
            col(Evaluation.id).in_(ids), col(Evaluation.ci_low).is_not(None)
        )
    )
    return {i: (low, high) for i, low, high in rows}


CurvePoint = tuple[float, float, float | None, float | None]  # x, mean@k, its 95% interval


def curve(session: Session, run: Run, x: str) -> tuple[list[CurvePoint], str]:
    """The run's points on this x axis with their intervals, and a note for the legend when it
    has none."""
    tests = test_points(session, run.id)
    ci = intervals(session, tests)
    points = [
        (x_value(p, x), p.y, *ci.get(p.evaluation_id, (None, None)))
        for p in tests
        if x_value(p, x) is not None
    ]
    note = "" if points else f" (no {x} recorded)" if tests else " (no test points)"
    return points, note


def as_points(points: list[CurvePoint]) -> list[dict]:
    """A curve as the JSON gives it: {x, y, low, high} per point."""
    return [{"x": x, "y": y, "low": low, "high": high} for x, y, low, high in points]


def label(run: Run) -> str:
    """The run as a legend entry: id, strategy, name, cut to fit."""
    text = f"#{run.id} {run.strategy or run.kind}: {run.name}"
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def time_unit(longest_s: float) -> tuple[float, str]:
    """Seconds, minutes or hours, whichever keeps the tick labels short."""
    if longest_s >= 2 * 3600:
        return 3600, "h"
    return (60, "min") if longest_s >= 120 else (1, "s")


def x_axis(x: str, longest: float) -> tuple[float, str]:
    """What to divide x by, and the axis label: wall time goes in minutes or hours."""
    if x != "wall_s":
        return 1, X_LABELS[x]
    scale, unit = time_unit(longest)
    return scale, f"{X_LABELS[x]} ({unit})"
