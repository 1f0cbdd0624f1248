"""Harnesses: one harness with its code, lineage neighbours and evaluations."""
from typing import Any

from sqlmodel import Session, select

from app.api.common import NotFound, as_dict
from app.api.evaluations import evaluation_rows
from app.db.schema import Evaluation, Harness


def _ref(harness: Harness) -> dict[str, Any]:
    return {"id": harness.id, "name": harness.name, "proposer": harness.proposer,
            "valid": harness.valid}  # fmt: skip


def get_harness(s: Session, harness_id: int) -> dict[str, Any]:
    harness = s.get(Harness, harness_id)
    if harness is None:
        raise NotFound("harness", harness_id)
    parent = s.get(Harness, harness.parent_id) if harness.parent_id is not None else None
    children = s.exec(select(Harness).where(Harness.parent_id == harness_id).order_by(Harness.id))
    return {
        "harness": as_dict(harness),
        "parent": _ref(parent) if parent else None,
        "children": [_ref(child) for child in children],
        "evaluations": evaluation_rows(s, Evaluation.harness_id == harness_id),
    }
