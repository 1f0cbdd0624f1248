"""JSON API (placeholder, being filled in)."""
from fastapi import APIRouter, Request
from sqlmodel import select

from app.db.schema import Run

router = APIRouter()


@router.get("/runs")
def runs(request: Request):
    with request.app.state.workbench.session() as s:
        return [r.model_dump() for r in s.exec(select(Run).order_by(Run.id.desc()))]
