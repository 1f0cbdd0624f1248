"""A run's test curve: its test mean@k points against the x axis the reader picks (rollouts
used, RFT steps, wall time), with the labels every rendering (page, JSON, PNG) shares."""

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.db.schema import Evaluation, Metric, Rollout, Run, TrainingJob, now, utc
from app.phases import TEST_SERIES
from app.stats import few_tasks

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
                "n_tasks": e.n_tasks,
                "few_tasks": few_tasks(e.n_tasks),  # the page says so beside the chart
                **{f"n_{status}": bad.get((e.id, status), 0) for status in UNSCORED},
            }
        low, high = (e.ci_low, e.ci_high) if e is not None else (None, None)
        points.append({"x": x_value(p, x), "y": p.y, "low": low, "high": high, **facts})
    return points


def test_k(run: Run) -> int | None:
    """The k the run's config asks its test mean@k for: experiments keep it in their parsed
    config, `whale train` runs as test_k."""
    config = run.config or {}
    test = (config.get("experiment") or {}).get("test") or {}
    return test.get("k") or config.get("test_k")


def test_scale(session: Session, run: Run) -> dict:
    """What the run's test mean@k is measured on: its domain (the tasks), k and the verifier's
    scoring mode, as its test evaluations recorded them. k is that of the evaluations its
    curve plots (else of any test evaluation, else the config's); `ks` lists every k when its
    own points mix several."""
    plotted = session.exec(
        select(Evaluation.k)
        .join(Metric, col(Metric.evaluation_id) == Evaluation.id)
        .where(Metric.run_id == run.id, Metric.series == TEST_SERIES)
        .order_by(Metric.id)
    ).all()
    tests = select(Evaluation.k, Evaluation.scoring).where(
        Evaluation.run_id == run.id, Evaluation.split == "test"
    )
    rows = session.exec(tests.order_by(Evaluation.id)).all()
    ks = plotted or [k for k, _ in rows]
    scorings = sorted({s for _, s in rows if s is not None})
    return {
        "domain": run.domain,
        "k": ks[-1] if ks else test_k(run),  # the newest point's
        "ks": sorted(set(ks)) if len(set(ks)) > 1 else None,
        "scoring": ", ".join(scorings) or None,  # None: not recorded
    }


def _runs(ids: list[int]) -> str:
    return ("run " if len(ids) == 1 else "runs ") + ", ".join(map(str, ids))


def mixed_scales(scales: list[dict]) -> list[str]:
    """Why the runs' test mean@k, put on one axis, are not one scale: they test other tasks
    (domains), average other numbers of samples (k), or score answers by other rules. One note
    per difference, naming each run's value; none when they agree."""
    notes = []
    for key, what, why in (
        ("domain", "test different domains", "their tasks differ"),
        ("k", "measure mean@k with different k", "a mean over more samples is another number"),
        ("scoring", "were scored by different scoring modes", "the verifiers differ"),
    ):
        by_value: dict[str, list[int]] = {}
        for r in scales:
            if r.get(key) is not None:
                by_value.setdefault(str(r[key]), []).append(r["id"])
        if len(by_value) > 1:
            prefix = "k=" if key == "k" else ""
            named = "; ".join(f"{_runs(ids)} {prefix}{v}" for v, ids in by_value.items())
            notes.append(f"these runs {what}: {named}; their curves are not on one scale ({why})")
    for r in scales:
        if r.get("ks"):
            mixed = ", ".join(map(str, r["ks"]))
            notes.append(
                f"run {r['id']}'s own test points mix k={mixed}: its curve is not one scale"
            )
    return notes


def phase_spans(session: Session, run: Run, phases: list[dict], x: str) -> list[dict]:
    """The x range each phase of the run covers on the test curve's axis, in phase order, so a
    chart can shade it and a reader see which phase moved the curve. `phases` are the run's
    timeline rows (with the rollouts each used so far).

    Rollouts used: the phases one after another, each as wide as the rollouts it used (a test
    point's x counts the same rollouts). Wall time: from the phase's start to its end (a running
    one: to now), in seconds since the run was created. RFT steps: only weight phases, from the
    steps before them to their last; a harness phase trains nothing and has no width there."""
    steps: dict[int | None, int] = {}
    if x == "weight_steps":
        steps = dict(
            session.exec(
                select(TrainingJob.phase_id, func.count())
                .where(
                    TrainingJob.run_id == run.id,
                    col(TrainingJob.status).in_(("done", "skipped")),  # as steps_done counts
                )
                .group_by(TrainingJob.phase_id)
            ).all()
        )
    origin, spans, start = utc(run.created_at), [], 0.0
    for i, p in enumerate(phases):
        if x == "rollouts":
            x0, x1 = start, start + p["rollouts"]
        elif x == "weight_steps":
            if p["kind"] != "weight":
                continue
            x0, x1 = start, start + steps.get(p["id"], 0)
        else:
            # an ended phase that recorded no end: until the next one started
            after = phases[i + 1]["created_at"] if i + 1 < len(phases) else p["created_at"]
            end = utc(p["finished_at"]) or (now() if p["status"] == "running" else utc(after))
            x0 = (utc(p["created_at"]) - origin).total_seconds()
            x1 = max((end - origin).total_seconds(), x0)
        start = x1
        spans.append(
            {
                "phase_id": p["id"],
                "kind": p["kind"],
                "round": p["round"],
                "label": f"{p['kind']} phase {p['round']}",
                "status": p["status"],
                "ended_reason": p.get("ended_reason"),
                "rollouts": p["rollouts"],
                "x0": x0,
                "x1": x1,
            }
        )
    return spans


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
