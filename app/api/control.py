"""Starting and steering loop runs over HTTP: POST /api/runs, POST /api/runs/{id}/{action}.

Refusals are answers, not errors: a bad experiment is a 422 naming the key, a conflicting
action (pause while stopping, skip while resuming...) a 409 saying why; nothing changes.
"""

from typing import Literal

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel
from sqlmodel import select

from app.api.common import NotFound, RowId, SessionDep, as_dict
from app.db.schema import Event, Run
from app.loop import control
from app.loop.experiment import ExperimentError

router = APIRouter()


class StartRequest(BaseModel):
    experiment: str  # the experiment's TOML text


class ControlRequest(BaseModel):
    reason: str = ""
    kind: Literal["weight", "harness"] | None = None  # force
    harness_id: int | None = None  # promote
    checkpoint_id: int | None = None  # promote


@router.post("/runs", status_code=201)
async def start(body: StartRequest, request: Request):
    """Start a run of an experiment given as TOML text."""
    try:
        run = await request.app.state.loops.start(body.experiment)
    except ExperimentError as exc:
        raise HTTPException(422, str(exc)) from None
    return {"run": as_dict(run)}


@router.post("/runs/{run_id}/{action}")
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


@router.get("/runs/{run_id}/events")
def events(run_id: RowId, s: SessionDep):
    """The run's log: starts, control actions (applied and refused), phase ends, the end."""
    if s.get(Run, run_id) is None:
        raise NotFound("run", run_id)
    rows = s.exec(select(Event).where(Event.run_id == run_id).order_by(Event.id)).all()
    return [as_dict(e) for e in rows]
