"""What a run has used so far: the one accounting every strategy shares, so runs compare at
equal cost. Rollouts of test evaluations are reporting, not search, and are not counted;
smoke rollouts of harness candidates are."""
from dataclasses import dataclass

from sqlalchemy import func
from sqlmodel import Session, select

from app.db.schema import Evaluation, Rollout, SearchIteration


@dataclass(frozen=True)
class Usage:
    rollouts: int
    tokens: int  # prompt + completion tokens of those rollouts and of the proposers
    proposer_usd: float


def usage(s: Session, run_id: int) -> Usage:
    rollouts, tokens = s.exec(
        select(func.count(), func.coalesce(func.sum(Rollout.prompt_tokens + Rollout.completion_tokens), 0))
        .join(Evaluation, Evaluation.id == Rollout.evaluation_id)
        .where(Rollout.run_id == run_id, Evaluation.split != "test", Rollout.status != "pending")
    ).one()  # fmt: skip
    proposer_tokens, usd = s.exec(
        select(func.coalesce(func.sum(SearchIteration.prompt_tokens + SearchIteration.completion_tokens), 0),
               func.coalesce(func.sum(SearchIteration.cost_usd), 0.0))
        .where(SearchIteration.run_id == run_id)
    ).one()  # fmt: skip
    return Usage(rollouts, tokens + proposer_tokens, usd)
