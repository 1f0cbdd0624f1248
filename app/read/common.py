"""What every resource module shares: the session dependency, "not found", row -> dict.

The data functions of this package return plain dicts; app/web/pages.py serves each page's
dict as JSON and renders it as HTML, so both always show the same data.
"""

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from fastapi import Depends, HTTPException, Path, Request
from sqlmodel import Session, SQLModel

from app.db.schema import Phase, utc

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
