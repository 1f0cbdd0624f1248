"""Rollouts: the filtered, paged list and one rollout with its trace (the ordered steps).

Queries are shaped for the indexes in app/db/migrations.py - rollout(run_id, status, id),
rollout(evaluation_id, id), step(rollout_id, idx) - so a page costs the same at a million rows.
"""
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.api.common import (
    FAILED_STATUSES, ROLLOUT_STATUSES, NotFound, as_dict, utc,
)  # fmt: skip
from app.db.schema import Checkpoint, Evaluation, Harness, Rollout, Run, Step

PAGE_SIZE = 50

# The list leaves out the large columns (stdout/stderr tails, error tracebacks): the trace page
# shows them.
LIST_COLUMNS = [
    Rollout.id, Rollout.run_id, Rollout.evaluation_id, Rollout.harness_id, Rollout.checkpoint_id,
    Rollout.task_id, Rollout.sample, Rollout.task, Rollout.gold, Rollout.status, Rollout.reason,
    Rollout.answer, Rollout.reward, Rollout.turns, Rollout.prompt_tokens,
    Rollout.completion_tokens, Rollout.wall_s, Rollout.created_at, Rollout.finished_at,
]  # fmt: skip


def question_of(task: dict | None) -> str | None:
    """The task's question, or the first text field for domains that name it differently."""
    if not task:
        return None
    if isinstance(task.get("question"), str):
        return task["question"]
    return next((v for v in task.values() if isinstance(v, str)), None)


def _list_item(row) -> dict[str, Any]:
    item = dict(row._mapping)
    item["created_at"] = utc(item["created_at"])
    item["finished_at"] = utc(item["finished_at"])
    item["question"] = question_of(item["task"])
    item["tokens"] = item["prompt_tokens"] + item["completion_tokens"]
    return item


def status_counts(s: Session, run_id: int | None = None,
                  evaluation_id: int | None = None) -> dict[str, int]:  # fmt: skip
    """Rollouts per status (every status present, zeros included), counted by the database."""
    query = select(Rollout.status, func.count()).group_by(Rollout.status)
    if run_id is not None:
        query = query.where(Rollout.run_id == run_id)
    if evaluation_id is not None:
        query = query.where(Rollout.evaluation_id == evaluation_id)
    counts = dict.fromkeys(ROLLOUT_STATUSES, 0)
    counts.update(dict(s.exec(query).all()))
    return counts


def recent_failures(s: Session, run_id: int, limit: int = 10) -> list[dict[str, Any]]:
    """The run's newest failed rollouts (fail, error, timeout), newest first.

    One query per status walks the (run_id, status, id) index backwards and stops after
    `limit` rows; a single `status IN (...)` query would sort every failure of the run.
    """
    found = []
    for status in FAILED_STATUSES:
        query = (
            select(*LIST_COLUMNS)
            .where(Rollout.run_id == run_id, Rollout.status == status)
            .order_by(col(Rollout.id).desc())
            .limit(limit)
        )
        found += [_list_item(row) for row in s.exec(query)]
    return sorted(found, key=lambda r: r["id"], reverse=True)[:limit]


def list_rollouts(s: Session, run: int | None = None, evaluation: int | None = None,
                  status: str | None = None, page: int = 1) -> dict[str, Any]:  # fmt: skip
    """One page of rollouts in id order (tasks in order, samples together), filtered."""
    context: dict[str, Any] = {"run": None, "evaluation": None}
    query = select(*LIST_COLUMNS)
    if run is not None:
        found = s.get(Run, run)
        if found is None:
            raise NotFound("run", run)
        context["run"] = {"id": found.id, "name": found.name, "status": found.status}
        query = query.where(Rollout.run_id == run)
    if evaluation is not None:
        found = s.get(Evaluation, evaluation)
        if found is None:
            raise NotFound("evaluation", evaluation)
        context["evaluation"] = {"id": found.id, "run_id": found.run_id, "split": found.split,
                                 "k": found.k, "harness_id": found.harness_id}  # fmt: skip
        query = query.where(Rollout.evaluation_id == evaluation)
    if status is not None:
        query = query.where(Rollout.status == status)
    # One row more than a page tells whether there is a next page without counting them all.
    query = query.order_by(Rollout.id).offset((page - 1) * PAGE_SIZE).limit(PAGE_SIZE + 1)
    items = [_list_item(row) for row in s.exec(query)]
    counts = None
    if run is not None or evaluation is not None:  # unfiltered counts would scan every rollout
        counts = status_counts(s, run_id=run, evaluation_id=evaluation)
    return {
        "items": items[:PAGE_SIZE],
        "page": page,
        "page_size": PAGE_SIZE,
        "has_more": len(items) > PAGE_SIZE,
        "filters": {"run": run, "evaluation": evaluation, "status": status},
        "status_counts": counts,
        **context,
    }


def get_rollout(s: Session, rollout_id: int) -> dict[str, Any]:
    """One rollout with everything its trace page shows: names around it and its steps in order."""
    rollout = s.get(Rollout, rollout_id)
    if rollout is None:
        raise NotFound("rollout", rollout_id)
    run = s.get(Run, rollout.run_id)
    harness = s.get(Harness, rollout.harness_id)
    checkpoint = s.get(Checkpoint, rollout.checkpoint_id)
    steps = s.exec(select(Step).where(Step.rollout_id == rollout_id).order_by(Step.idx)).all()
    return {
        "rollout": {
            **as_dict(rollout),
            "question": question_of(rollout.task),
            "tokens": rollout.prompt_tokens + rollout.completion_tokens,
        },
        "run": {"id": run.id, "name": run.name, "domain": run.domain, "status": run.status},
        "harness": {"id": harness.id, "name": harness.name, "sha": harness.sha},
        "checkpoint": {"id": checkpoint.id, "name": checkpoint.name, "kind": checkpoint.kind},
        "steps": [as_dict(step) for step in steps],
    }
