"""The writes over HTTP: starting a run and steering it, as JSON (POST /api/runs, POST
/api/runs/{id}/{action}) and as the forms of the pages (the start form, the control buttons).

Refusals are answers, not errors: a bad experiment is a 422 naming the key, a conflicting
action (pause while stopping, skip while resuming...) a 409 saying why; nothing changes. The
forms answer the same refusals in place, inside the page.
"""

from typing import Annotated, Literal

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel

from app import control
from app.loop.experiment_file import ExperimentError
from app.loop.manager import submit
from app.read.common import NotFound, RowId, SessionDep, as_dict
from app.read.dashboard import XAxis
from app.web.pages import run_data, runs_data
from app.web.templating import render

EMPTY_EXPERIMENT = "the experiment is empty: paste an experiment's TOML, or pick a preset above"
FORM_SOURCE = "ui"  # what submit() prefixes its errors with, for the start form

api = APIRouter()
forms = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


class StartRequest(BaseModel):
    experiment: str  # the experiment's TOML text
    force: bool = False  # start a plan the machine check refuses (app/fit.py)
    fork_from: str = ""  # "RUN:PHASE": a fork of that run's phase boundary (app/loop/fork.py)


class ControlRequest(BaseModel):
    reason: str = ""
    kind: Literal["weight", "harness"] | None = None  # force
    harness_id: int | None = None  # promote
    checkpoint_id: int | None = None  # promote


@api.post("/runs", status_code=201)
async def start(body: StartRequest, request: Request):
    """Start a run of an experiment given as TOML text: it is checked, stored (`created`, with
    its first harness) and started by the loop process, which loads the model first if need be."""
    try:
        run = await submit(
            request.app.state.workbench, body.experiment, force=body.force, fork_from=body.fork_from
        )
    except ExperimentError as exc:
        raise HTTPException(422, str(exc)) from None
    return {"run": as_dict(run)}


@api.post("/runs/{run_id}/{action}")
async def act(
    run_id: RowId, action: Literal[control.ACTIONS], body: ControlRequest, request: Request
):
    """pause | resume | stop | skip | force (kind) | promote (harness_id or checkpoint_id)."""
    args = body.model_dump(exclude_none=True, exclude={"reason"})
    try:
        event = await control.apply(
            request.app.state.workbench.writer, run_id, action, body.reason, "api", **args
        )
    except control.NoSuchRun:
        raise NotFound("run", run_id) from None
    except control.Refused as exc:
        raise HTTPException(409, f"{action} refused: {exc}") from None
    return {"event": as_dict(event)}


@forms.post("/runs")
async def start_form(
    request: Request,
    s: SessionDep,
    experiment: Annotated[str, Form()] = "",
    preset: Annotated[str | None, Form()] = None,
    force: Annotated[bool, Form()] = False,
    fork_from: Annotated[str, Form(max_length=40)] = "",
):
    """Start a run from the experiment text in the form (posted by htmx), then open its page; a
    bad experiment comes back as the form again, in place, with the text and the preset picked
    kept and the error naming the key (an empty one says so: "name: Field required" would
    puzzle)."""
    try:
        if not experiment.strip():
            raise ExperimentError(EMPTY_EXPERIMENT)
        run = await submit(request.app.state.workbench, experiment, FORM_SOURCE, force, fork_from)
    except ExperimentError as exc:
        # the error names its source for a file ("x.toml: budget..."); the form is no file
        error = str(exc).removeprefix(f"{FORM_SOURCE}: ")
        context = runs_data(
            s, error=error, experiment=experiment, preset=preset, fork_from=fork_from
        )
        return render(request, "_start_run.html", context, status_code=422)
    return Response(status_code=204, headers={"HX-Redirect": f"/runs/{run.id}"})


@forms.post("/runs/{run_id}/control")
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
    return render(request, "_run_live.html", run_data(s, run_id, x, baseline, message))
