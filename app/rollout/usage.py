"""What a run has used so far, and what its budgets leave: the one accounting every strategy
shares, so runs compare at equal cost. The loop stops on it and the run page shows it, from the
same functions. Rollouts of test evaluations are reporting, not search, and are not counted;
smoke rollouts of harness candidates are."""

from dataclasses import dataclass, replace

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.db.schema import Evaluation, Metric, Phase, Rollout, Run, SearchIteration, TrainingJob


@dataclass(frozen=True)
class Usage:
    rollouts: int
    tokens: int  # prompt + completion tokens of those rollouts and of the proposers
    proposer_usd: float
    weight_steps: int = 0  # finished RFT steps (one that accepted nothing and trained none too)
    proposing_iterations: int = 0  # finished iterations after each harness phase's iteration 0


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


# The budgets an experiment may set ([budget] in its TOML), in the order they are shown.
BUDGETS = ("rollouts", "tokens", "proposer_usd", "wall_s", "weight_steps", "proposing_iterations")
EXCEEDED = {
    "rollouts": "budget: rollouts",
    "tokens": "budget: tokens",
    "proposer_usd": "budget: proposer cost",
    "wall_s": "budget: wall time",
    "weight_steps": "budget: weight steps",
    "proposing_iterations": "budget: proposing iterations",
}
# Budgets in the release's units: each limits its own kind of phase, which the loop ends when
# it is used up (app/loop/driver.py); what the run does next depends on its strategy.
PHASE_BUDGETS = {"weight": "weight_steps", "harness": "proposing_iterations"}


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
    proposing = s.exec(
        select(func.count())
        .select_from(SearchIteration)
        .where(
            SearchIteration.run_id == run_id,
            SearchIteration.iteration > 0,
            col(SearchIteration.status).in_(("done", "failed")),
        )
    ).one()
    return Usage(rollouts, tokens + proposer_tokens, usd, weight_steps_done(s, run_id), proposing)


# what a fork carries over from its parent (app/loop/fork.py), wall time aside
USAGE_FIELDS = ("rollouts", "tokens", "proposer_usd", "weight_steps", "proposing_iterations")


def carried(s: Session, run_id: int) -> dict[str, float]:
    """What a fork's budgets start from: its parent's spending at the fork point when its
    experiment continues the parent's budget (`[budget] after_fork`, app/loop/fork.py), else
    nothing."""
    run = s.get(Run, run_id)
    fork = (run.config or {}).get("fork") if run is not None else None
    budget = ((run.config or {}).get("experiment") or {}).get("budget") or {} if fork else {}
    if not fork or budget.get("after_fork") == "fresh":
        return {}
    return fork["spent"]


def budget_usage(s: Session, run_id: int) -> Usage:
    """usage() as the run's budgets count it: a fork that continues its parent's budget counts
    what the parent had spent by the fork point too."""
    used, before = usage(s, run_id), carried(s, run_id)
    return replace(
        used, **{name: getattr(used, name) + before.get(name, 0) for name in USAGE_FIELDS}
    )


def weight_steps_done(s: Session, run_id: int, phase_ids: list[int] | None = None) -> int:
    """The run's finished RFT steps over all its weight phases (the x of its test points), or
    over those of `phase_ids`."""
    query = select(func.count()).select_from(TrainingJob)
    if phase_ids is not None:
        query = query.where(col(TrainingJob.phase_id).in_(phase_ids))
    return s.exec(
        query.where(TrainingJob.run_id == run_id, col(TrainingJob.status).in_(("done", "skipped")))
    ).one()


def spending(s: Session, run_id: int, wall_s: float) -> dict[str, float]:
    """What the run spent of each budget (a fork's as budget_usage counts it), its wall time
    (measured by the caller) included."""
    used = budget_usage(s, run_id)
    return {
        "rollouts": used.rollouts,
        "tokens": used.tokens,
        "proposer_usd": used.proposer_usd,
        "wall_s": wall_s + carried(s, run_id).get("wall_s", 0),
        "weight_steps": used.weight_steps,
        "proposing_iterations": used.proposing_iterations,
    }


def budget_lines(limits: dict, spent: dict[str, float]) -> list[dict]:
    """Each budget: what it allows (None: unlimited), what the run used, what is left."""
    lines = []
    for name in BUDGETS:
        limit, used = limits.get(name), spent[name]
        lines.append(
            {
                "name": name,
                "used": used,
                "limit": limit,
                "left": None if limit is None else max(limit - used, 0),
                "share": None if not limit else min(used / limit, 1.0),
            }
        )
    return lines


def over_budget(limits: dict, spent: dict[str, float], next_cost: int) -> str | None:
    """Which budget stops the run before its next unit of work (costing `next_cost` rollouts):
    the rollout budget when that unit would overshoot it, any other once it is used up."""
    for name in BUDGETS:
        limit = limits.get(name)
        if limit is None or name in PHASE_BUDGETS.values():
            continue
        if name == "rollouts" and spent[name] + max(next_cost, 1) > limit:
            return EXCEEDED[name]
        if name != "rollouts" and spent[name] >= limit:
            return EXCEEDED[name]
    return None


def phase_budget_left(limits: dict, used: Usage, kind: str) -> bool:
    """Whether a phase of `kind` may take another step or proposing iteration."""
    name = PHASE_BUDGETS[kind]
    return limits.get(name) is None or getattr(used, name) < limits[name]


def rollouts_used(session: Session, run_id: int) -> int:
    """Rollouts the run used, as its curve counts them: its metrics count them as it goes, its
    phases when they end; a run may have only one of the two (older runs have no phases), so
    take the larger."""
    by_metrics = session.exec(select(func.max(Metric.rollouts)).where(Metric.run_id == run_id))
    by_phases = session.exec(select(func.sum(Phase.rollouts)).where(Phase.run_id == run_id))
    return max(by_metrics.one() or 0, by_phases.one() or 0)
