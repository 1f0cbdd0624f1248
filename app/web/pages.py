"""HTML pages. Each page renders the dict its JSON twin under /api returns (see app/api/)."""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from app.api.checkpoints import get_checkpoint
from app.api.common import RowId, SessionDep
from app.api.contrast import ContrastQuery, contrast
from app.api.harnesses import AgainstQuery, FullQuery, get_harness, pickable
from app.api.lineage import get_lineage
from app.api.rollout_filters import MAX_ID, STATUS_CHOICES, RolloutFilters, filter_choices
from app.api.rollouts import StepsQuery, get_rollout, list_rollouts, model_step_before
from app.api.trace_compare import CompareQuery, compare_candidates, compare_rollouts
from app.api.training import get_training_job
from app.web.lineage import legend_svg, lineage_svg
from app.web.templating import render
from app.web.trace import trace_segments

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


def show(request: Request, template: str, load: Callable[[], dict[str, Any]]) -> HTMLResponse:
    """Render `template` with what `load` returns, or a readable error page for an unknown id
    (404) or a request that cannot be answered (e.g. 422: nothing picked to compare)."""
    try:
        context = load()
    except HTTPException as exc:
        return render(
            request,
            "404.html",
            {"message": exc.detail, "status": exc.status_code},
            status_code=exc.status_code,
        )
    return render(request, template, context)


@router.get("/harnesses/{harness_id}")
def harness_page(
    request: Request,
    harness_id: RowId,
    s: SessionDep,
    against: AgainstQuery = None,
    full: FullQuery = False,
):
    def load():
        data = get_harness(s, harness_id, against=against, full=full)
        return {**data, "pickable": pickable(s, data["harness"]["run_id"]), "full": full}

    return show(request, "harness.html", load)


@router.get("/runs/{run_id}/lineage")
def lineage_page(request: Request, run_id: RowId, s: SessionDep):
    def load():
        data = get_lineage(s, run_id)
        return {**data, "tree": lineage_svg(data), "legend": legend_svg()}

    return show(request, "lineage.html", load)


@router.get("/rollouts")
def rollouts_page(request: Request, s: SessionDep, filters: Annotated[RolloutFilters, Query()]):
    def load():
        data = list_rollouts(s, **filters.model_dump())
        return {
            **data,
            "statuses": STATUS_CHOICES,
            "here": filters.url_params(),
            "choices": filter_choices(s, filters.run),
            "max_id": MAX_ID,
        }

    return show(request, "rollouts.html", load)


@router.get("/rollouts/contrast")
def contrast_page(request: Request, s: SessionDep, query: Annotated[ContrastQuery, Query()]):
    def load():  # until a side is picked, the form alone
        data = (
            contrast(s, query) if query.picked() else {"query": query.model_dump(), "tasks": None}
        )
        return {**data, "choices": filter_choices(s, query.run)}

    return show(request, "contrast.html", load)


@router.get("/rollouts/compare")
def compare_page(request: Request, s: SessionDep, query: Annotated[CompareQuery, Query()]):
    def load():
        data = compare_rollouts(s, query)
        for side in (data["a"], data["b"]):
            side["segments"] = _segments(s, side)
        return data

    return show(request, "trace_compare.html", load)


def _segments(s, data: dict[str, Any]) -> list[dict[str, Any]]:
    """A trace's loaded steps laid out with the gaps between them (app/web/trace.py)."""
    rollout_id = data["rollout"]["id"]
    return trace_segments(data, lambda idx: model_step_before(s, rollout_id, idx))


@router.get("/rollouts/{rollout_id}")
def rollout_page(request: Request, rollout_id: RowId, s: SessionDep, steps: StepsQuery = None):
    def load():
        data = get_rollout(s, rollout_id, steps, window=True)
        return {
            **data,
            "segments": _segments(s, data),
            "compare_with": compare_candidates(s, rollout_id),
        }

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
