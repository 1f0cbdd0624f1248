"""What a run has used so far: the one accounting every strategy shares, so runs compare at
equal cost. Rollouts of test evaluations are reporting, not search, and are not counted;
smoke rollouts of harness candidates are."""

from dataclasses import dataclass

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.db.schema import Evaluation, Rollout, SearchIteration


@dataclass(frozen=True)
class Usage:
    rollouts: int
    tokens: int  # prompt + completion tokens of those rollouts and of the proposers
    proposer_usd: float


def spent(s: Session, *which) -> tuple[int, int]:
    """(finished rollouts, their tokens) of the non-test evaluations matching `which`.

    A finished evaluation carries its totals; only the rollouts of unfinished ones are read row
    by row, so the cost does not grow with the run (the run page asks every 2 seconds)."""
    counted = (*which, Evaluation.split != "test")
    done_rollouts, done_tokens = s.exec(
        select(
            func.coalesce(func.sum(Evaluation.n_done), 0),
            func.coalesce(func.sum(Evaluation.total_tokens), 0),
        ).where(*counted, Evaluation.status == "done")
    ).one()
    live = s.exec(select(Evaluation.id).where(*counted, Evaluation.status != "done")).all()
    if not live:
        return done_rollouts, done_tokens
    live_rollouts, live_tokens = s.exec(
        select(
            func.count(),
            func.coalesce(func.sum(Rollout.prompt_tokens + Rollout.completion_tokens), 0),
        ).where(col(Rollout.evaluation_id).in_(live), Rollout.status != "pending")
    ).one()
    return done_rollouts + live_rollouts, done_tokens + live_tokens


def usage(s: Session, run_id: int) -> Usage:
    rollouts, tokens = spent(s, Evaluation.run_id == run_id)
    proposer_tokens, usd = s.exec(
        select(
            func.coalesce(
                func.sum(SearchIteration.prompt_tokens + SearchIteration.completion_tokens), 0
            ),
            func.coalesce(func.sum(SearchIteration.cost_usd), 0.0),
        ).where(SearchIteration.run_id == run_id)
    ).one()
    return Usage(rollouts, tokens + proposer_tokens, usd)
