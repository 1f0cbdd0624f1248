"""People's annotations over HTTP: a run's tags and note, a rollout's labels and note, as JSON
(PUT /api/runs/{id}/annotations, PUT /api/rollouts/{id}/annotations) and as the edit forms of
the run and trace pages (htmx). app/annotations.py checks and writes them.

A refusal changes nothing: bad text is a 422 saying what is wrong (the form comes back in place
with what was typed and the reason), a rollout still pending a 409.
"""

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from app.annotations import (
    AnnotationError,
    NotLabellable,
    annotate_rollout,
    annotate_run,
    split_names,
)
from app.db.schema import Rollout
from app.read.annotations import rollout_annotations, run_annotations
from app.read.common import NotFound, RowId, SessionDep
from app.web.templating import render

api = APIRouter()
forms = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


class RunAnnotations(BaseModel):
    tags: list[str] | None = Field(default=None, description="replaces the tags; null: kept")
    note: str | None = Field(default=None, description='replaces the note ("": none); null: kept')


class RolloutAnnotations(BaseModel):
    labels: list[str] | None = Field(default=None, description="replaces the labels; null: kept")
    note: str | None = Field(default=None, description='replaces the note ("": none); null: kept')


def _refused(exc: Exception) -> HTTPException:
    status = 409 if isinstance(exc, NotLabellable) else 422
    return HTTPException(status, str(exc))


@api.put("/runs/{run_id}/annotations")
async def put_run_annotations(run_id: RowId, body: RunAnnotations, request: Request, s: SessionDep):
    """Set a run's tags and/or note (a field left out or null stays as it is)."""
    try:
        await annotate_run(request.app.state.workbench.writer, run_id, body.tags, body.note)
    except AnnotationError as exc:
        raise _refused(exc) from None
    return {"run_id": run_id, **run_annotations(s, [run_id])[run_id]}


@api.put("/rollouts/{rollout_id}/annotations")
async def put_rollout_annotations(
    rollout_id: RowId, body: RolloutAnnotations, request: Request, s: SessionDep
):
    """Set a rollout's labels and/or note (a field left out or null stays as it is); a rollout
    still pending is refused (409)."""
    writer = request.app.state.workbench.writer
    try:
        await annotate_rollout(writer, rollout_id, body.labels, body.note)
    except (AnnotationError, NotLabellable) as exc:
        raise _refused(exc) from None
    return {"rollout_id": rollout_id, **rollout_annotations(s, [rollout_id])[rollout_id]}


def _form(
    request: Request,
    s,
    what: str,
    owner: int,
    run_id: int,
    refused: AnnotationError | None = None,
    typed: tuple[str, str] | None = None,
) -> HTMLResponse:
    """_annotations.html with what is saved now; after a refusal (422) also the reason and the
    text typed, so nothing is lost."""
    if what == "run":
        saved = run_annotations(s, [owner])[owner]
        names = saved["tags"]
    else:
        saved = rollout_annotations(s, [owner])[owner]
        names = saved["labels"]
    ann = {
        "what": what,
        "owner": owner,
        "run_id": run_id,
        "names": names,
        "note": saved["note"],
        "error": None if refused is None else str(refused),
        "typed": typed,
    }
    return render(request, "_annotations.html", {"ann": ann}, 200 if refused is None else 422)


@forms.post("/runs/{run_id}/annotations")
async def run_annotations_form(
    request: Request,
    run_id: RowId,
    s: SessionDep,
    tags: Annotated[str, Form()] = "",
    note: Annotated[str, Form()] = "",
):
    """The run page's edit form: saves like PUT /api/runs/{id}/annotations and answers with the
    annotations shown again; bad text comes back as the form, with what was typed and why."""
    try:
        await annotate_run(request.app.state.workbench.writer, run_id, split_names(tags), note)
    except AnnotationError as exc:
        return _form(request, s, "run", run_id, run_id, exc, (tags, note))
    return _form(request, s, "run", run_id, run_id)


@forms.post("/rollouts/{rollout_id}/annotations")
async def rollout_annotations_form(
    request: Request,
    rollout_id: RowId,
    s: SessionDep,
    labels: Annotated[str, Form()] = "",
    note: Annotated[str, Form()] = "",
):
    """The trace page's label form: saves like PUT /api/rollouts/{id}/annotations and answers
    with the labels shown again; bad text comes back as the form, with what was typed and why."""
    rollout = s.get(Rollout, rollout_id)
    if rollout is None:
        raise NotFound("rollout", rollout_id)
    writer = request.app.state.workbench.writer
    try:
        await annotate_rollout(writer, rollout_id, split_names(labels), note)
    except NotLabellable as exc:
        raise _refused(exc) from None
    except AnnotationError as exc:
        return _form(request, s, "rollout", rollout_id, rollout.run_id, exc, (labels, note))
    return _form(request, s, "rollout", rollout_id, rollout.run_id)
