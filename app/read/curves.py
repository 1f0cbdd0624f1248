"""A run's test curve: its test mean@k points against the x axis the reader picks (rollouts
used, RFT steps, wall time), with the labels every rendering (page, JSON, PNG) shares."""

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.db.schema import Evaluation, Metric, Rollout, Run
from app.phases import TEST_SERIES

X_LABELS = {
    "rollouts": "rollouts used (training + harness search)",
    "weight_steps": "RFT steps",
    "wall_s": "wall-clock time",
}
LABEL_CHARS = 44
UNSCORED = ("timeout", "error", "infra")  # rollout outcomes a test point's tooltip counts


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


def measured(session: Session, run: Run, x: str) -> list[dict]:
    """curve()'s points as the pages give them: {x, y, low, high} and what each measured - its
    evaluation, harness, checkpoint, k and split, and how many of its rollouts timed out,
    erred or failed on the infrastructure (a score with those in it means less)."""
    tests = [p for p in test_points(session, run.id) if x_value(p, x) is not None]
    ids = [p.evaluation_id for p in tests if p.evaluation_id is not None]
    evaluations = {
        e.id: e for e in session.exec(select(Evaluation).where(col(Evaluation.id).in_(ids)))
    }
    bad = {
        (i, status): n
        for i, status, n in session.exec(
            select(Rollout.evaluation_id, Rollout.status, func.count())
            .where(col(Rollout.evaluation_id).in_(ids), col(Rollout.status).in_(UNSCORED))
            .group_by(Rollout.evaluation_id, Rollout.status)
        )
    }
    points = []
    for p in tests:
        e = evaluations.get(p.evaluation_id)
        facts = {}  # a point from before evaluations were linked to it measured nothing stored
        if e is not None:
            facts = {
                "evaluation_id": e.id,
                "harness_id": e.harness_id,
                "checkpoint_id": e.checkpoint_id,
                "k": e.k,
                "split": e.split,
                **{f"n_{status}": bad.get((e.id, status), 0) for status in UNSCORED},
            }
        low, high = (e.ci_low, e.ci_high) if e is not None else (None, None)
        points.append({"x": x_value(p, x), "y": p.y, "low": low, "high": high, **facts})
    return points


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
