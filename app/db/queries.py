"""Queries over the store that both sides stand on: the loop, which writes these rows, and the
read side (app/read/), which shows them. Each answers one question the same way for both, so a
page never disagrees with what the loop decided."""

from sqlmodel import Session, col, or_, select

from app.db.schema import Checkpoint, Evaluation, Phase, Rollout
from app.stats import per_task_means


def task_means(s: Session, evaluation_id: int) -> dict[str, float]:
    """{task id: mean reward of its samples} of an evaluation, as its mean@k counts them
    (infrastructure failures and unfinished rollouts left out)."""
    rows = s.exec(
        select(Rollout.task_id, Rollout.reward).where(
            Rollout.evaluation_id == evaluation_id, col(Rollout.status).not_in(("infra", "pending"))
        )
    )
    return per_task_means(rows)


def weights_needed(s: Session, run_id: int) -> dict[int, str]:
    """The run's checkpoints that must keep their weights, each with the reason."""
    why: dict[int, str] = {}
    for phase in s.exec(select(Phase).where(Phase.run_id == run_id)):
        for checkpoint_id in (phase.checkpoint_in_id, phase.checkpoint_out_id):
            if checkpoint_id is not None:
                why.setdefault(checkpoint_id, f"phase {phase.id} starts or ends with it")
    trained = select(Checkpoint.id).where(Checkpoint.run_id == run_id)
    evaluations = s.exec(
        select(Evaluation).where(
            col(Evaluation.checkpoint_id).in_(trained),
            or_(Evaluation.split == "test", Evaluation.status != "done"),
        )
    )
    for e in evaluations:
        reason = "evaluated on the test split" if e.split == "test" else "an evaluation uses it"
        why.setdefault(e.checkpoint_id, f"{reason} (evaluation {e.id})")
    newest = s.exec(
        select(Checkpoint.id)
        .where(Checkpoint.run_id == run_id, col(Checkpoint.training_job_id).is_not(None))
        .order_by(col(Checkpoint.id).desc())
    ).first()
    if newest is not None:
        why.setdefault(newest, "the newest: served and trained on next")
    return why
