"""The trace browser's filters: one query model that the JSON list and the HTML page both take,
the SQL condition each filter adds, and the names of what the filters point at.

All of them live in the URL, so a filtered view can be shared. A GET form sends the fields a
user left blank as empty values; those mean "no filter", not a malformed value. The form offers
harnesses, checkpoints and phases by name and sends their ids; a name typed into the URL
instead (`harness=seed.py`, `phase=weight phase 2`) is looked up (resolve_names).
"""

import re
import unicodedata
from typing import Annotated, Any, Literal, get_args

from fastapi import HTTPException
from pydantic import BaseModel, Field, field_validator, model_validator
from sqlmodel import Session, col, select

from app.db.schema import Checkpoint, Evaluation, Harness, Phase, Rollout, Run
from app.read.annotations import annotated_with, label_counts, labelled
from app.read.common import FAILED_STATUSES, NotFound, phase_ref

MAX_ID = 2**63 - 1  # SQLite ids are signed 64-bit: a larger number is malformed, not unknown
# A status, or "failed": fail, error and timeout together (in the order the chips show them).
# A pending rollout is "running" once it has a sandbox (its start is recorded), "queued" before;
# "pending" is both.
StatusChoice = Literal[
    "running", "queued", "pending", "pass", "failed", "fail", "error", "timeout", "infra"
]
STATUS_CHOICES: tuple[str, ...] = get_args(StatusChoice)


def id_param(what: str, required: bool = False) -> Any:
    return Field(default=... if required else None, ge=0, le=MAX_ID, description=what)


# A harness, checkpoint or phase: its id, or its name (a phase's is "weight phase 2").
IdOrName = Annotated[int, Field(ge=0, le=MAX_ID)] | Annotated[str, Field(max_length=200)]
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
PHASE_NAME = re.compile(r"(weight|harness)\s*(?:phase)?\s*(\d{1,9})", re.IGNORECASE)


class FormParams(BaseModel):
    """Query parameters a GET form sends: a field left blank is no value. Control characters
    are refused: none is typed into a filter, and SQLite ends a LIKE pattern at a NUL, so
    `q=%00` would match every row."""

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        if isinstance(value, str):
            control = next((c for c in value if unicodedata.category(c) == "Cc"), None)
            if control is not None:
                raise ValueError(f"control characters are not allowed (found U+{ord(control):04X})")
            return value.strip() or None
        return value


class RolloutFilters(FormParams):
    """Query parameters of /rollouts and /api/rollouts. Filters combine with AND."""

    run: int | None = id_param("only this run's rollouts")
    evaluation: int | None = id_param("only this evaluation's rollouts")
    phase: IdOrName | None = Field(
        default=None,
        description="only rollouts of this phase's evaluations: its id, or its name (\"weight "
        'phase 2"; with `run`, or the only run that has one so named)',
    )
    harness: IdOrName | None = Field(
        default=None, description="only rollouts under this harness: its id, or its name"
    )
    checkpoint: IdOrName | None = Field(
        default=None, description="only rollouts under this checkpoint: its id, or its name"
    )
    task: Annotated[str | None, Field(max_length=200, description="only this task id")] = None
    status: StatusChoice | None = Field(
        default=None,
        description='a status, "failed" for fail, error and timeout together, or "running" '
        'and "queued" for the pending rollouts in a sandbox and those waiting for one',
    )
    label: Annotated[
        str | None, Field(max_length=200, description="only rollouts labelled so (exactly)")
    ] = None
    q: Annotated[
        str | None,
        Field(
            max_length=200,
            description=(
                "text in the answer, error or failure reason, or in a label or note people gave "
                "it (case-insensitive); searches a bounded number of rows per page, see `search` "
                "in the answer"
            ),
        ),
    ] = None
    after: int | None = id_param("the page after this rollout id (the `next_after` of a page)")
    before: int | None = id_param("the page before this rollout id (the `prev_before` of a page)")

    @field_validator("phase", "harness", "checkpoint", mode="before")
    @classmethod
    def _id_or_name(cls, value: Any) -> Any:
        """Digits are an id; another number (-1, 1.5) is a malformed id, not a name."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.isascii() and text.isdigit():
            if int(text) > MAX_ID:
                raise ValueError(f"an id is at most {MAX_ID}")
            return int(text)
        if NUMBER.fullmatch(text):
            raise ValueError("an id is a whole number from 0 up (or give the name)")
        return value

    @model_validator(mode="after")
    def _one_cursor(self) -> "RolloutFilters":
        if self.after is not None and self.before is not None:
            raise ValueError("after and before cannot be combined: a page starts from one side")
        return self

    def url_params(self) -> dict[str, Any]:
        """The filters (not the cursor) as they appear in a URL; links keep them."""
        return {
            k: v for k, v in self.model_dump(exclude={"after", "before"}).items() if v is not None
        }


def statuses_of(status: str | None) -> tuple[str, ...]:
    if status is None:
        return ()
    if status in ("running", "queued"):
        return ("pending",)
    return FAILED_STATUSES if status == "failed" else (status,)


def conditions(f: RolloutFilters) -> list:
    """The WHERE terms of the filters (the text search aside). Each one has an index that keeps
    id order (see migration 005), so the database walks it and stops after a page."""
    terms = []
    for value, column in (
        (f.run, Rollout.run_id),
        (f.evaluation, Rollout.evaluation_id),
        (f.harness, Rollout.harness_id),
        (f.checkpoint, Rollout.checkpoint_id),
        (f.task, Rollout.task_id),
    ):
        if value is not None:
            terms.append(column == value)
    if f.phase is not None:  # rollouts belong to a phase through their evaluation
        in_phase = select(Evaluation.id).where(Evaluation.phase_id == f.phase)
        terms.append(col(Rollout.evaluation_id).in_(in_phase))
    if f.label is not None:  # labels are few: the database reads their index, then the ids
        terms.append(labelled(f.label))
    statuses = statuses_of(f.status)
    if statuses:
        terms.append(col(Rollout.status).in_(statuses))
    if f.status == "running":
        terms.append(col(Rollout.started_at).is_not(None))
    elif f.status == "queued":
        terms.append(col(Rollout.started_at).is_(None))
    return terms


def text_condition(q: str):
    """`q` anywhere in the answer, error or reason, or in a label or note people gave the
    rollout; LIKE is case-insensitive for ASCII."""
    fields = (Rollout.answer, Rollout.error, Rollout.reason)
    terms = [col(c).contains(q, autoescape=True) for c in fields]
    return terms[0] | terms[1] | terms[2] | annotated_with(q)


def scope(s: Session, f: RolloutFilters) -> dict[str, Any]:
    """What the id filters name, for the page's title; an id that names nothing is a 404."""
    found: dict[str, Any] = {
        "run": None,
        "evaluation": None,
        "phase": None,
        "harness": None,
        "checkpoint": None,
    }
    if f.run is not None:
        run = _get(s, Run, f.run, "run")
        found["run"] = {"id": run.id, "name": run.name, "status": run.status}
    if f.evaluation is not None:
        e = _get(s, Evaluation, f.evaluation, "evaluation")
        found["evaluation"] = {
            "id": e.id,
            "run_id": e.run_id,
            "split": e.split,
            "k": e.k,
            "harness_id": e.harness_id,
        }
    if f.phase is not None:
        found["phase"] = phase_ref(_get(s, Phase, f.phase, "phase"))
    if f.harness is not None:
        h = _get(s, Harness, f.harness, "harness")
        found["harness"] = {"id": h.id, "name": h.name, "run_id": h.run_id}
    if f.checkpoint is not None:
        c = _get(s, Checkpoint, f.checkpoint, "checkpoint")
        found["checkpoint"] = {"id": c.id, "name": c.name, "kind": c.kind}
    return found


def _get(s: Session, table, id: int, what: str):
    row = s.get(table, id)
    if row is None:
        raise NotFound(what, id)
    return row


def run_of(s: Session, f: RolloutFilters) -> int | None:
    """The one run every listed rollout belongs to, if the filters name one: the run, or the
    run of the evaluation or (by id) phase."""
    if f.run is not None:
        return f.run
    if f.evaluation is not None:
        evaluation = s.get(Evaluation, f.evaluation)
        return evaluation.run_id if evaluation else None
    if isinstance(f.phase, int):
        phase = s.get(Phase, f.phase)
        return phase.run_id if phase else None
    return None


def resolve_names(s: Session, f: RolloutFilters) -> RolloutFilters:
    """The filters with a harness, checkpoint or phase given by name replaced by its id. A name
    is looked up among the run's (see run_of) or, without one, the whole store's. A name that
    names nothing is a 404; one that names several is a 422 listing their ids."""
    run = run_of(s, f)
    where = f" in run {run}" if run is not None else ""
    changes: dict[str, int] = {}
    for field, table in (("harness", Harness), ("checkpoint", Checkpoint)):
        name = getattr(f, field)
        if isinstance(name, str):
            query = select(table.id).where(table.name == name)
            if run is not None:
                query = query.where(_of_run(table, run))
            ids = s.exec(query.order_by(table.id)).all()
            changes[field] = _one(field, name, ids, where)
    if isinstance(f.phase, str):
        named = PHASE_NAME.fullmatch(f.phase.strip())
        if named is None:
            raise HTTPException(
                422, f"phase: {f.phase!r} is no phase: give its id or its name, as 'weight phase 2'"
            )
        kind, round_ = named.group(1).lower(), int(named.group(2))
        query = select(Phase.id).where(Phase.kind == kind, Phase.round == round_)
        if run is not None:
            query = query.where(Phase.run_id == run)
        ids = s.exec(query.order_by(Phase.id)).all()
        changes["phase"] = _one("phase", f"{kind} phase {round_}", ids, where)
    return f.model_copy(update=changes) if changes else f


def _of_run(table, run: int):
    """The rows a run made or evaluated under: the run's own, and those its evaluations used
    (the base checkpoint, a harness it started from)."""
    used = Evaluation.harness_id if table is Harness else Evaluation.checkpoint_id
    return (table.run_id == run) | col(table.id).in_(select(used).where(Evaluation.run_id == run))


PLURAL = {"harness": "harnesses", "checkpoint": "checkpoints", "phase": "phases"}


def _one(field: str, name: str, ids: list[int], where: str) -> int:
    if not ids:
        raise HTTPException(404, f"No {field} named {name!r}{where}")
    if len(ids) > 1:
        shown = ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else "")
        raise HTTPException(
            422,
            f"{field}: {name!r} names {len(ids)} {PLURAL[field]}{where} (ids {shown}): "
            f"pick one by id{'' if where else ', or add run=ID'}",
        )
    return ids[0]


def filter_choices(
    s: Session, run: int | None, limit: int = 300
) -> dict[str, list[dict[str, Any]]]:
    """Harnesses, checkpoints, phases and labels the filter form offers by name: the run's (those it
    made or evaluated under) when the list is scoped to one, otherwise the newest. Read from
    the small tables, never from rollouts."""

    def newest(table, *columns):
        query = select(*columns)
        if run is not None:
            query = query.where(_of_run(table, run) if table is not Phase else Phase.run_id == run)
        newest_first = s.exec(query.order_by(col(table.id).desc()).limit(limit)).all()
        return newest_first[::-1]  # shown in the order they were made

    def of_run(r: int | None) -> str:  # scoped to one run, its name says enough
        return f" (run {r})" if r is not None and run is None else ""

    return {
        "harnesses": [
            {"id": i, "label": f"{name}{of_run(r)}"}
            for i, name, r in newest(Harness, Harness.id, Harness.name, Harness.run_id)
        ],
        "checkpoints": [
            {"id": i, "label": f"{name} ({kind})"}
            for i, name, kind in newest(Checkpoint, Checkpoint.id, Checkpoint.name, Checkpoint.kind)
        ],
        "phases": [
            {"id": i, "label": f"{kind} phase {rnd}{of_run(r)}"}
            for i, kind, rnd, r in newest(Phase, Phase.id, Phase.kind, Phase.round, Phase.run_id)
        ],
        "labels": label_counts(s, run_id=run)[:limit],  # people's labels, most used first
    }
