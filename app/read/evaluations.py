"""Evaluation rows as the run and harness pages list them, with harness, checkpoint, run names."""

from typing import Any

from sqlmodel import Session, select

from app.db.schema import Checkpoint, Evaluation, Harness, Run
from app.read.common import as_dict
from app.stats import few_tasks


def evaluation_rows(s: Session, *where) -> list[dict[str, Any]]:
    """Evaluations matching `where` (SQL conditions on Evaluation), oldest first."""
    query = (
        select(Evaluation, Harness.name, Checkpoint.name, Run.name)
        .join(Harness, Harness.id == Evaluation.harness_id)
        .join(Checkpoint, Checkpoint.id == Evaluation.checkpoint_id)
        .join(Run, Run.id == Evaluation.run_id)
        .where(*where)
        .order_by(Evaluation.id)
    )
    rows = []
    for evaluation, harness_name, checkpoint_name, run_name in s.exec(query):
        total = evaluation.n_tasks * evaluation.k  # one rollout row per task and sample
        rows.append(
            {
                **as_dict(evaluation),
                "harness_name": harness_name,
                "checkpoint_name": checkpoint_name,
                "run_name": run_name,
                "n_rollouts": total,
                "progress": evaluation.n_done / total if total else 1.0,
                "few_tasks": few_tasks(evaluation.n_tasks),  # the page says so beside mean@k
            }
        )
    return rows
