"""HTML pages. Each page renders the dict its JSON twin under /api returns (see app/api/)."""
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.api.checkpoints import get_checkpoint
from app.api.common import (
    ROLLOUT_STATUSES, EvaluationFilter, NotFound, Page, RowId, RunFilter, SessionDep, StatusFilter,
)  # fmt: skip
from app.api.harnesses import get_harness
from app.api.rollouts import get_rollout, list_rollouts
from app.api.runs import get_run, list_runs
from app.api.training import get_training_job
from app.web.templating import render
from app.web.trace import step_views

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


def show(request: Request, template: str, load: Callable[[], dict[str, Any]]) -> HTMLResponse:
    """Render `template` with what `load` returns, or a readable 404 page for an unknown id."""
    try:
        context = load()
    except NotFound as exc:
        return render(request, "404.html", {"message": exc.detail}, status_code=404)
    return render(request, template, context)


@router.get("/")
@router.get("/runs")
def runs_page(request: Request, s: SessionDep):
    return show(request, "runs.html", lambda: {"runs": list_runs(s)})


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: RowId, s: SessionDep):
    return show(request, "run.html", lambda: get_run(s, run_id))


@router.get("/runs/{run_id}/live")
def run_live_fragment(request: Request, run_id: RowId, s: SessionDep):
    """The part of the run page that htmx polls while the run is running."""
    return show(request, "_run_live.html", lambda: get_run(s, run_id))


@router.get("/harnesses/{harness_id}")
def harness_page(request: Request, harness_id: RowId, s: SessionDep):
    return show(request, "harness.html", lambda: get_harness(s, harness_id))


@router.get("/rollouts")
def rollouts_page(request: Request, s: SessionDep, run: RunFilter = None,
                  evaluation: EvaluationFilter = None, status: StatusFilter = None,
                  page: Page = 1):  # fmt: skip
    def load():
        data = list_rollouts(s, run=run, evaluation=evaluation, status=status, page=page)
        return {**data, "statuses": ROLLOUT_STATUSES}

    return show(request, "rollouts.html", load)


@router.get("/rollouts/{rollout_id}")
def rollout_page(request: Request, rollout_id: RowId, s: SessionDep):
    def load():
        data = get_rollout(s, rollout_id)
        return {**data, "step_views": step_views(data["steps"])}

    return show(request, "rollout.html", load)


@router.get("/training/{job_id}")
def training_job_page(request: Request, job_id: RowId, s: SessionDep):
    return show(request, "training_job.html", lambda: get_training_job(s, job_id))


@router.get("/training/{job_id}/live")
def training_job_live_fragment(request: Request, job_id: RowId, s: SessionDep):
    """The part of the job page that htmx polls while the job samples or trains."""
    return show(request, "_training_live.html", lambda: get_training_job(s, job_id))


@router.get("/checkpoints/{checkpoint_id}")
def checkpoint_page(request: Request, checkpoint_id: RowId, s: SessionDep):
    return show(request, "checkpoint.html", lambda: get_checkpoint(s, checkpoint_id))
