"""A run's harness phases: each iteration (proposer, cost, frontier) and each candidate with its
score, for the run page and /api/runs/{id}."""

from typing import Any

from sqlmodel import Session, select

from app.db.schema import Evaluation, Harness, Phase, SearchIteration
from app.read.common import as_dict

CANDIDATE_FIELDS = (
    "id",
    "name",
    "proposer",
    "valid",
    "error",
    "iteration",
    "axis",
    "hypothesis",
    "changes",
    "parent_id",
    "parent_ids",
)


def get_harness_phases(s: Session, run_id: int) -> list[dict[str, Any]]:
    phases = s.exec(
        select(Phase).where(Phase.run_id == run_id, Phase.kind == "harness").order_by(Phase.id)
    ).all()
    return [_phase(s, phase) for phase in phases]


def _phase(s: Session, phase: Phase) -> dict[str, Any]:
    iterations = s.exec(
        select(SearchIteration)
        .where(SearchIteration.phase_id == phase.id)
        .order_by(SearchIteration.iteration)
    ).all()
    candidates = s.exec(
        select(Harness).where(Harness.phase_id == phase.id).order_by(Harness.id)
    ).all()
    scores = {
        e.harness_id: e
        for e in s.exec(
            select(Evaluation).where(
                Evaluation.phase_id == phase.id,
                Evaluation.split == "harness",
                Evaluation.status == "done",
            )
        )
    }
    incoming = s.get(Harness, phase.harness_in_id) if phase.harness_in_id else None
    if incoming and incoming.id not in scores:  # iteration 0 reused an earlier phase's score
        scores[incoming.id] = s.exec(
            select(Evaluation).where(
                Evaluation.harness_id == incoming.id,
                Evaluation.checkpoint_id == phase.checkpoint_in_id,
                Evaluation.split == "harness",
                Evaluation.status == "done",
            )
        ).first()

    # the commit gate's decision on each candidate (app/search/acceptance.py)
    gates = {int(h): g for i in iterations for h, g in (i.gate or {}).items()}

    def row(h: Harness) -> dict[str, Any]:
        score = scores.get(h.id)
        return {
            **{k: getattr(h, k) for k in CANDIDATE_FIELDS},
            "success": score.mean_at_k if score else None,
            "mean_turns": score.mean_turns if score else None,
            "evaluation_id": score.id if score else None,
            "n_tasks": score.n_tasks if score else None,  # fewer when a sequential gate stopped
            "gate": gates.get(h.id),
            "accepted": h.id == phase.harness_out_id,
        }

    return {
        "phase": as_dict(phase),
        "incoming": row(incoming) if incoming else None,
        "iterations": [as_dict(i) for i in iterations],
        "candidates": [row(h) for h in candidates],
        "best_success": [
            {"x": i.iteration, "y": i.best_success}
            for i in iterations
            if i.best_success is not None
        ],
        "proposer_tokens": sum(i.prompt_tokens + i.completion_tokens for i in iterations),
        "proposer_cost_usd": sum(i.cost_usd or 0.0 for i in iterations),
    }
