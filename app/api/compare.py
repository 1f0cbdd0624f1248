"""Several runs side by side: their summaries and their test curves on one x axis. The compare
page and /api/runs/compare show the same dict."""

from typing import Annotated, Any

from fastapi import HTTPException, Query
from sqlmodel import Session

from app.api.dashboard import XAxis
from app.report.compare import summarize
from app.report.plot import X_LABELS, curve, label
from app.report.runs import UnknownRuns, get_runs

MAX_RUNS = 10  # the chart has ten colours
RunIds = Annotated[list[int], Query(description="the runs to compare: ids=1&ids=2...")]


def get_comparison(s: Session, run_ids: list[int], x: XAxis = "rollouts") -> dict[str, Any]:
    if not run_ids:
        raise HTTPException(422, "ids: pick at least one run to compare")
    if len(run_ids) > MAX_RUNS:
        raise HTTPException(422, f"ids: at most {MAX_RUNS} runs at a time, not {len(run_ids)}")
    try:
        runs = get_runs(s, run_ids)
    except UnknownRuns as exc:
        raise HTTPException(404, str(exc)) from None
    return {
        "x": x,
        "x_label": X_LABELS[x],
        "runs": [summarize(s, run) for run in runs],
        "curves": {
            label(run): [{"x": px, "y": py} for px, py in curve(s, run, x)[0]] for run in runs
        },
    }
