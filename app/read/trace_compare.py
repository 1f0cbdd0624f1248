"""Two traces side by side, and which traces a trace is worth comparing with: the same task
under other harnesses or checkpoints, the other outcome first."""

from typing import Any

from sqlmodel import Session, col, select

from app.db.schema import Checkpoint, Harness, Rollout, Run
from app.read.rollout_filters import FormParams, id_param
from app.read.rollouts import get_rollout

CANDIDATES = 8  # (harness, checkpoint) pairs offered on a trace page
CANDIDATE_SCAN = 500  # newest rollouts of the task looked at to find them


class CompareQuery(FormParams):
    a: int = id_param("the rollout shown on the left", required=True)
    b: int = id_param("the rollout shown on the right", required=True)


def compare_rollouts(s: Session, query: CompareQuery) -> dict[str, Any]:
    """Both rollouts as their trace pages show them (a long trace: its first and last steps)."""
    a = get_rollout(s, query.a)
    b = get_rollout(s, query.b)
    same_task = (
        a["rollout"]["task_id"] == b["rollout"]["task_id"]
        and a["run"]["domain"] == b["run"]["domain"]
    )
    warning = None
    if not same_task:
        warning = (
            f"Different tasks: {a['run']['domain']} {a['rollout']['task_id']} on the "
            f"left, {b['run']['domain']} {b['rollout']['task_id']} on the right."
        )
    return {"a": a, "b": b, "same_task": same_task, "warning": warning}


def compare_candidates(s: Session, rollout_id: int) -> list[dict[str, Any]]:
    """Finished rollouts of the same task (same domain) under other (harness, checkpoint) pairs,
    one per pair, those with the other outcome (pass vs. not) first, then the newest."""
    rollout = s.get(Rollout, rollout_id)
    if rollout is None:
        return []
    domain = s.get(Run, rollout.run_id).domain
    rows = s.exec(
        select(
            Rollout.id,
            Rollout.status,
            Rollout.answer,
            Rollout.reward,
            Rollout.run_id,
            Rollout.harness_id,
            Harness.name.label("harness_name"),
            Rollout.checkpoint_id,
            Checkpoint.name.label("checkpoint_name"),
        )
        .join(Run, Run.id == Rollout.run_id)
        .join(Harness, Harness.id == Rollout.harness_id)
        .join(Checkpoint, Checkpoint.id == Rollout.checkpoint_id)
        .where(
            Rollout.task_id == rollout.task_id, Run.domain == domain, Rollout.status != "pending"
        )
        .order_by(col(Rollout.id).desc())
        .limit(CANDIDATE_SCAN)
    ).all()
    passed = rollout.status == "pass"
    own_pair = (rollout.harness_id, rollout.checkpoint_id)
    best: dict[tuple[int, int], Any] = {}
    for row in rows:  # newest first: the first of each outcome per pair is kept
        pair = (row.harness_id, row.checkpoint_id)
        if pair == own_pair:
            continue
        other_outcome = (row.status == "pass") != passed
        if pair not in best or (other_outcome and (best[pair].status == "pass") == passed):
            best[pair] = row
    ranked = sorted(best.values(), key=lambda r: ((r.status == "pass") == passed, -r.id))
    return [dict(r._mapping) for r in ranked[:CANDIDATES]]
