"""Runs side by side: how good each got on the test split and how many rollouts it took, and
their test curves on one x axis. The compare page, /api/runs/compare and `whale compare` show
these summaries."""

from typing import Annotated, Any

from fastapi import HTTPException, Query
from sqlmodel import Session, select

from app.db.schema import Evaluation, Run
from app.read.curves import X_LABELS, curve, label, test_points
from app.read.dashboard import XAxis
from app.read.runs import UnknownRuns, get_runs
from app.rollout.usage import rollouts_used

MAX_RUNS = 10  # the chart has ten colours
RunIds = Annotated[list[int], Query(description="the runs to compare: ids=1&ids=2...")]


def test_k(run: Run) -> int | None:
    """The k of the run's test mean@k: experiments keep it in their parsed config, `whale
    train` runs as test_k."""
    config = run.config or {}
    test = (config.get("experiment") or {}).get("test") or {}
    return test.get("k") or config.get("test_k")


def test_scoring(session: Session, run: Run) -> str | None:
    """The verifier mode of the run's test evaluations (one per run: it comes from its config)."""
    found = session.exec(
        select(Evaluation.scoring)
        .where(Evaluation.run_id == run.id, Evaluation.split == "test")
        .distinct()
    ).all()
    return ", ".join(sorted(f for f in found if f is not None)) or None  # None: not recorded


def mixed_scales(summaries: list[dict]) -> list[str]:
    """What makes the runs' mean@k not one scale: different k, or different scoring modes."""
    notes = []
    for key, what in (("k", "k"), ("scoring", "scoring modes")):
        groups: dict[str, list[str]] = {}
        for r in summaries:
            if r[key] is not None:
                groups.setdefault(str(r[key]), []).append(str(r["id"]))
        if len(groups) > 1:
            named = "; ".join(f"{v}: runs {', '.join(ids)}" for v, ids in sorted(groups.items()))
            notes.append(f"these runs differ in {what} ({named}): their mean@k are not one scale")
    return notes


def summarize(session: Session, run: Run) -> dict:
    points = test_points(session, run.id)
    best = max(points, key=lambda p: p.y, default=None)  # max keeps the first of equals
    return {
        "id": run.id,
        "name": run.name,
        "strategy": run.strategy or run.kind,
        "status": run.status,
        "k": test_k(run),
        "scoring": test_scoring(session, run),
        "best": best.y if best else None,
        "rollouts_to_best": best.rollouts if best else None,
        "final": points[-1].y if points else None,
        "rollouts_used": rollouts_used(session, run.id),
        "test_points": len(points),
    }


def compare_runs(session: Session, run_ids: list[int]) -> list[dict]:
    """One summary per run, in the order given; raises UnknownRuns for ids not in the store."""
    return [summarize(session, run) for run in get_runs(session, run_ids)]


def get_comparison(s: Session, run_ids: list[int], x: XAxis = "rollouts") -> dict[str, Any]:
    if not run_ids:
        raise HTTPException(422, "ids: pick at least one run to compare")
    if len(run_ids) > MAX_RUNS:
        raise HTTPException(422, f"ids: at most {MAX_RUNS} runs at a time, not {len(run_ids)}")
    try:
        runs = get_runs(s, run_ids)
    except UnknownRuns as exc:
        raise HTTPException(404, str(exc)) from None
    summaries = [summarize(s, run) for run in runs]
    return {
        "x": x,
        "x_label": X_LABELS[x],
        "runs": summaries,
        "notes": mixed_scales(summaries),
        "curves": {
            label(run): [{"x": px, "y": py} for px, py in curve(s, run, x)[0]] for run in runs
        },
    }
