"""What every resource module shares: the session dependency, "not found", row -> dict.

The data functions of this package return plain dicts; app/web/pages.py serves each page's
dict as JSON and renders it as HTML, so both always show the same data.
"""

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from fastapi import Depends, HTTPException, Path, Request
from sqlalchemy import func
from sqlmodel import Session, SQLModel, select

from app.db.schema import Phase, TrainingJob, utc

# Every value Rollout.status can take.
RolloutStatus = Literal["pending", "pass", "fail", "error", "timeout", "infra"]
ROLLOUT_STATUSES: tuple[str, ...] = get_args(RolloutStatus)
FAILED_STATUSES = ("fail", "error", "timeout")

# An id in a path. SQLite keeps ids in signed 64 bits: a larger number is malformed (422), where
# a plain int would reach the database and overflow there (500).
RowId = Annotated[int, Path(le=2**63 - 1)]


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.workbench.session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


class NotFound(HTTPException):
    """An id that names nothing. The JSON API answers it as a 404; pages show a 404 page."""

    def __init__(self, what: str, id: int):
        super().__init__(status_code=404, detail=f"{what.capitalize()} {id} not found")


def as_dict(row: SQLModel) -> dict[str, Any]:
    """A table row as a dict, columns in table order, datetimes in UTC; a column marked
    `exclude` (a step's packed token ids) is left out, as model_dump leaves it."""
    fields = type(row).model_fields
    data = {name: getattr(row, name) for name, f in fields.items() if not f.exclude}
    return {k: utc(v) if isinstance(v, datetime) else v for k, v in data.items()}


def phase_ref(phase: Phase | None) -> dict[str, Any] | None:
    """What a mention of a phase shows: its kind and round, the run's own numbering ("harness
    phase 2"); the id is the store's, for URLs only."""
    if phase is None:
        return None
    return {"id": phase.id, "run_id": phase.run_id, "kind": phase.kind, "round": phase.round}


def step_numbers(s: Session, job: TrainingJob) -> dict[str, Any]:
    """An RFT step named the same way on every page and in the JSON (docs/ui.md, "RFT
    steps"): counted from 1 within its weight phase and within its run, "step 1 of weight
    phase 3, step 3 of the run". The job's own `step` stays the store's count from 0."""
    in_phase = round_ = None
    if job.phase_id is not None:
        phase = s.get(Phase, job.phase_id)
        round_ = phase.round if phase else None
        in_phase = s.exec(
            select(func.count())
            .select_from(TrainingJob)
            .where(TrainingJob.phase_id == job.phase_id, TrainingJob.id <= job.id)
        ).one()
    return step_fields(job.step, in_phase, round_)


def step_fields(
    step: int, in_phase: int | None = None, phase_round: int | None = None
) -> dict[str, Any]:
    """step_numbers from what the caller knows: the job's 0-based `step`, its 1-based place in
    its phase and the phase's round (None for a `whale train` step, which has no phase)."""
    in_run = step + 1
    name = f"step {in_run} of the run"
    if in_phase is not None:
        name = f"step {in_phase} of weight phase {phase_round}, {name}"
    return {
        "step_in_run": in_run,
        "step_in_phase": in_phase,
        "phase_round": phase_round,
        "step_name": name,
    }
