"""The run pages: the list (and starting a run from it), several runs compared, one run's
dashboard with its live fragment, and the form behind the control buttons."""

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from app import ROOT
from app.api.common import NotFound, RowId, SessionDep
from app.api.compare import RunIds, get_comparison
from app.api.dashboard import BaselineQuery, XAxis, XQuery, get_dashboard, run_choices
from app.api.runs import get_run, list_runs
from app.loop import control
from app.loop.experiment import ExperimentError
from app.web.pages import show
from app.web.templating import render

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


def experiment_presets() -> dict[str, str]:
    """The experiment files shipped in experiments/, offered when starting a run."""
    folder = ROOT / "experiments"
    return {p.name: p.read_text() for p in sorted(folder.glob("*.toml"))} if folder.is_dir() else {}


def _runs_context(s, error: str | None = None, experiment: str | None = None) -> dict:
    presets = experiment_presets()
    default = presets.get("arith-quick.toml") or next(iter(presets.values()), "")
    return {
        "runs": list_runs(s),
        "presets": presets,
        "error": error,
        "experiment": experiment if experiment is not None else default,
    }


@router.get("/")
@router.get("/runs")
def runs_page(request: Request, s: SessionDep):
    return show(request, "runs.html", lambda: _runs_context(s))


@router.post("/runs")
async def start_run_form(request: Request, s: SessionDep, experiment: Annotated[str, Form()]):
    """Start a run from the experiment text in the form (posted by htmx), then open its page; a
    bad experiment comes back with the text kept and the error naming the key."""
    try:
        run = await request.app.state.loops.start(experiment, source="ui")
    except ExperimentError as exc:
        return render(
            request, "_start_run.html", _runs_context(s, str(exc), experiment), status_code=422
        )
    return Response(status_code=204, headers={"HX-Redirect": f"/runs/{run.id}"})


@router.get("/runs/compare")
def compare_page(request: Request, s: SessionDep, ids: RunIds = (), x: XQuery = "rollouts"):
    return show(request, "compare.html", lambda: {**get_comparison(s, list(ids), x), "ids": ids})


def _run_context(s, run_id: int, x: str, baseline: int | None, message: str | None = None) -> dict:
    return {
        **get_run(s, run_id),
        "dashboard": get_dashboard(s, run_id, x, baseline),
        "choices": run_choices(s),
        "view": {"x": x, "baseline": baseline},
        "message": message,
    }


@router.get("/runs/{run_id}")
def run_page(
    request: Request,
    run_id: RowId,
    s: SessionDep,
    x: XQuery = "rollouts",
    baseline: BaselineQuery = None,
):
    return show(request, "run.html", lambda: _run_context(s, run_id, x, baseline))


@router.get("/runs/{run_id}/live")
def run_live_fragment(
    request: Request,
    run_id: RowId,
    s: SessionDep,
    x: XQuery = "rollouts",
    baseline: BaselineQuery = None,
):
    """The part of the run page that htmx polls while the run can still change."""
    return show(request, "_run_live.html", lambda: _run_context(s, run_id, x, baseline))


@router.post("/runs/{run_id}/control")
async def control_form(
    request: Request,
    run_id: RowId,
    s: SessionDep,
    action: Annotated[str, Form()],
    kind: Annotated[str | None, Form()] = None,
    reason: Annotated[str, Form()] = "",
    x: Annotated[XAxis, Form()] = "rollouts",
    baseline: Annotated[int | None, Form()] = None,
):
    """A control button: applies the action like POST /api/runs/{id}/{action} and answers with
    the refreshed live fragment, saying what happened (or why it was refused)."""
    args = {"kind": kind} if kind else {}
    what = f"{action} {kind}" if kind else action
    try:
        await control.apply(
            request.app.state.workbench.writer, run_id, action, reason, "ui", **args
        )
        message = f"{what}: asked"
    except control.NoSuchRun:
        raise NotFound("run", run_id) from None
    except control.Refused as exc:
        message = f"{what} refused: {exc}"
    s.expire_all()  # the action was written by the writer's own session
    return show(request, "_run_live.html", lambda: _run_context(s, run_id, x, baseline, message))
