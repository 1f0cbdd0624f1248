"""Evaluation rows as the run and harness pages list them, with harness, checkpoint, run names,
and for an RFT step's sampling the step it sampled for (it is no test: the pages keep it
apart)."""

from typing import Any

from sqlmodel import Session, col, select

from app.db.schema import Checkpoint, Evaluation, Harness, Run, TrainingJob
from app.read.common import as_dict, step_numbers
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
    found = s.exec(query).all()
    sampled = _sampled_for(s, [e.id for e, *_ in found if e.split == "train"])
    rows = []
    for evaluation, harness_name, checkpoint_name, run_name in found:
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
                # "step 1 of weight phase 2, step 3 of the run": the RFT step it sampled for
                "sampling_for": sampled.get(evaluation.id),
            }
        )
    return rows


def _sampled_for(s: Session, evaluation_ids: list[int]) -> dict[int, str]:
    """The RFT step each of these train-split evaluations sampled for, named as everywhere
    (step_numbers), by evaluation id."""
    if not evaluation_ids:
        return {}
    jobs = s.exec(select(TrainingJob).where(col(TrainingJob.evaluation_id).in_(evaluation_ids)))
    return {job.evaluation_id: step_numbers(s, job)["step_name"] for job in jobs}
