"""Harnesses: one harness with its code, lineage neighbours, evaluations, a matrix of its
scores per checkpoint and split, and a diff of its code against its parent or any harness."""

from typing import Annotated, Any

from fastapi import Query
from sqlmodel import Session, col, select

from app.db.schema import Evaluation, Harness, Phase, Run
from app.read.common import NotFound, as_dict
from app.read.diff import CONTEXT, side_by_side
from app.read.evaluations import evaluation_rows

# The splits in the order a researcher reads them: search signal, reported score, training.
SPLIT_ORDER = ("harness", "test", "train")
# How many harnesses of other runs the "compare against" picker offers (newest first).
OTHER_RUNS_PICKABLE = 300

# The page's and the JSON twin's diff parameters.
AgainstQuery = Annotated[
    int | None, Query(le=2**63 - 1, description="diff against this harness instead of the parent")
]
FullQuery = Annotated[bool, Query(description="show every line of the diff, none folded")]


class NothingToCompare(NotFound):
    """`?against=` names no harness."""

    def __init__(self, harness_id: int):
        super().__init__("harness", harness_id)
        self.detail = f"Harness {harness_id} not found: there is nothing to compare against"


def _ref(harness: Harness) -> dict[str, Any]:
    return {
        "id": harness.id,
        "name": harness.name,
        "proposer": harness.proposer,
        "valid": harness.valid,
        "run_id": harness.run_id,
    }


def score_matrix(evaluations: list[dict[str, Any]]) -> dict[str, Any]:
    """Scores as rows = checkpoints (oldest first) x columns = splits (harness, test, train,
    then others). A cell is the newest finished evaluation of that pair, or, while none has
    finished, the newest one (its status shows); `n_evaluations` counts them all."""

    def split_order(split: str) -> tuple[int, str]:
        return (SPLIT_ORDER.index(split) if split in SPLIT_ORDER else len(SPLIT_ORDER), split)

    splits = sorted({e["split"] for e in evaluations}, key=split_order)
    rows: dict[int, dict[str, Any]] = {}
    for e in sorted(evaluations, key=lambda e: e["id"]):  # newer ones overwrite older ones
        row = rows.setdefault(
            e["checkpoint_id"],
            {
                "checkpoint_id": e["checkpoint_id"],
                "checkpoint_name": e["checkpoint_name"],
                "cells": {},
            },
        )
        cell = row["cells"].get(e["split"])
        count = cell["n_evaluations"] + 1 if cell else 1
        if cell is None or e["status"] == "done" or cell["status"] != "done":
            cell = {
                "evaluation_id": e["id"],
                "mean_at_k": e["mean_at_k"],
                "ci_low": e["ci_low"],
                "ci_high": e["ci_high"],
                "k": e["k"],
                "n_tasks": e["n_tasks"],
                "status": e["status"],
                "run_id": e["run_id"],
            }
        row["cells"][e["split"]] = {**cell, "n_evaluations": count}
    return {"splits": splits, "rows": [rows[c] for c in sorted(rows)]}


def pickable(s: Session, run_id: int | None) -> list[dict[str, Any]]:
    """What a harness of run `run_id` can be compared against, grouped by run: that run's first,
    then other runs' newest ones. Only ids and names are read, never the code."""
    columns = (Harness.id, Harness.name, Harness.run_id, Harness.iteration, Harness.valid, Run.name)
    query = select(*columns).outerjoin(Run, Run.id == Harness.run_id)
    own = s.exec(query.where(Harness.run_id == run_id).order_by(Harness.id)).all()
    others = s.exec(
        query.where(col(Harness.run_id).is_not(run_id))
        .order_by(col(Harness.id).desc())
        .limit(OTHER_RUNS_PICKABLE)
    ).all()
    groups: dict[Any, dict[str, Any]] = {}
    for hid, name, their_run, iteration, valid, run_name in [*own, *others]:
        group = groups.setdefault(
            their_run,
            {
                "run_id": their_run,
                "run_name": run_name,
                "own": their_run == run_id,
                "harnesses": [],
            },
        )
        group["harnesses"].append({"id": hid, "name": name, "iteration": iteration, "valid": valid})
    return list(groups.values())


def code_diff(
    s: Session, harness: Harness, against: int | None, full: bool = False
) -> dict[str, Any] | None:
    """The harness's code diffed against harness `against`, by default its parent; None when it
    has no parent and none was picked."""
    other_id = against if against is not None else harness.parent_id
    if other_id is None:
        return None
    other = s.get(Harness, other_id)
    if other is None:
        if against is not None:
            raise NothingToCompare(against)
        return None  # a parent id naming nothing: shown as "no parent"
    context = None if full else CONTEXT
    return {
        "against": _ref(other),
        "is_parent": other.id == harness.parent_id,
        "context": context,
        **side_by_side(other.code, harness.code, context=context),
    }


def get_harness(
    s: Session, harness_id: int, against: int | None = None, full: bool = False
) -> dict[str, Any]:
    harness = s.get(Harness, harness_id)
    if harness is None:
        raise NotFound("harness", harness_id)
    parent = s.get(Harness, harness.parent_id) if harness.parent_id is not None else None
    children = s.exec(select(Harness).where(Harness.parent_id == harness_id).order_by(Harness.id))
    other_parents = [s.get(Harness, p) for p in harness.parent_ids or [] if p != harness.parent_id]
    phase = s.get(Phase, harness.phase_id) if harness.phase_id is not None else None
    evaluations = evaluation_rows(s, Evaluation.harness_id == harness_id)
    return {
        "harness": as_dict(harness),
        "parent": _ref(parent) if parent else None,
        "other_parents": [_ref(p) for p in other_parents if p is not None],
        "children": [_ref(child) for child in children],
        "phase": None
        if phase is None
        else {"id": phase.id, "round": phase.round, "run_id": phase.run_id, "status": phase.status},
        "evaluations": evaluations,
        "scores": score_matrix(evaluations),
        "diff": code_diff(s, harness, against, full),
        "turns": _turns(s, harness),
    }


def _turns(s: Session, harness: Harness) -> dict[str, Any]:
    """The harness's own turn limit (its MAX_TURNS) and its run's clamp ([rollout] max_calls;
    None: the process default), which together give its rollouts' call budget."""
    from app.harness_code import declared_turns
    from app.llm.generation import declared_by

    run = s.get(Run, harness.run_id) if harness.run_id is not None else None
    clamp = (declared_by(run.config if run else None).get("rollout") or {}).get("max_calls")
    return {"declared": declared_turns(harness.code), "clamp": clamp}
