"""A run's harness phases: each iteration (proposer, cost, frontier), each candidate with its
score, and the phase's Pareto view (success against mean turns), for the run page and
/api/runs/{id}."""

from typing import Any

from sqlmodel import Session, select

from app.db.schema import Evaluation, Harness, Phase, SearchIteration
from app.pareto import Score, frontier
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
            "ci_low": score.ci_low if score else None,  # its 95% interval (app/stats.py)
            "ci_high": score.ci_high if score else None,
            "mean_turns": score.mean_turns if score else None,
            "evaluation_id": score.id if score else None,
            "n_tasks": score.n_tasks if score else None,  # fewer when a sequential gate stopped
            "gate": gates.get(h.id),
            "accepted": h.id == phase.harness_out_id,
        }

    rows = [row(h) for h in candidates]
    incoming_row = row(incoming) if incoming else None
    chosen = _chosen(phase, iterations)
    return {
        "phase": as_dict(phase),
        "incoming": incoming_row,
        "iterations": [as_dict(i) for i in iterations],
        "candidates": rows,
        "pareto": pareto(phase, iterations, [incoming_row, *rows] if incoming_row else rows),
        "candidate_lines": candidate_lines(phase, iterations, incoming_row, rows, chosen),
        "best_success": [
            {"x": i.iteration, "y": i.best_success}
            for i in iterations
            if i.best_success is not None
        ],
        "proposer_tokens": sum(i.prompt_tokens + i.completion_tokens for i in iterations),
        "proposer_cost_usd": sum(i.cost_usd or 0.0 for i in iterations),
    }


def pareto(phase: Phase, iterations: list[SearchIteration], rows: list[dict]) -> dict[str, Any]:
    """Every scored harness of the phase (the incoming one too) as a point (success up, mean
    turns down), which of them are on the Pareto front the phase selects on
    (app/pareto.py, over the same scores), and the harness it chose: the one it handed
    on, or while it runs the one accepted so far."""
    scored = [r for r in rows if r["success"] is not None and r["mean_turns"] is not None]
    front = frontier([Score(r["id"], r["success"], r["mean_turns"]) for r in scored])
    on_front = {f.harness_id for f in front}
    chosen = _chosen(phase, iterations)
    return {
        "points": [
            {
                "harness_id": r["id"],
                "name": r["name"],
                "iteration": r["iteration"],
                "success": r["success"],
                "mean_turns": r["mean_turns"],
                "incoming": r["id"] == phase.harness_in_id,
                "on_front": r["id"] in on_front,
                "chosen": r["id"] == chosen,
            }
            for r in scored
        ],
        "front": [f.harness_id for f in sorted(front, key=lambda f: f.turns)],
        "chosen_id": chosen,
        "final": phase.harness_out_id is not None,  # False: the phase may still change its pick
        "unscored": len(rows) - len(scored),  # invalid or not yet evaluated: not drawn
    }


def _chosen(phase: Phase, iterations: list[SearchIteration]) -> int | None:
    """The harness the phase handed on, or while it runs the one accepted so far."""
    accepted = [i.accepted_harness_id for i in iterations if i.accepted_harness_id]
    return phase.harness_out_id or (accepted[-1] if accepted else None)


def candidate_lines(
    phase: Phase,
    iterations: list[SearchIteration],
    incoming: dict | None,
    rows: list[dict],
    chosen: int | None,
) -> list[dict[str, Any]]:
    """Each scored candidate's success over the phase's iterations, one line each: from the
    iteration that proposed it (the incoming harness: 0) through every later iteration after
    which it was still on the frontier the phase selects from. A candidate's score is measured
    once, so its line is flat; how long it runs says how long it stayed in the race. Each point
    carries the score's 95% interval; `accepted` marks the harness the phase chose."""
    front_after = {i.iteration: {p["harness_id"] for p in i.frontier or []} for i in iterations}
    lines = []
    for r in [incoming, *rows] if incoming else rows:
        if r["success"] is None:
            continue  # invalid, or not evaluated yet
        start = 0 if incoming is not None and r["id"] == incoming["id"] else (r["iteration"] or 0)
        xs = [start] + [i for i in sorted(front_after) if i > start and r["id"] in front_after[i]]
        point = {"y": r["success"], "low": r["ci_low"], "high": r["ci_high"]}
        lines.append(
            {
                "harness_id": r["id"],
                "name": r["name"],
                "incoming": r["id"] == phase.harness_in_id,
                "accepted": r["id"] == chosen,
                "points": [{"x": x, **point} for x in xs],
            }
        )
    return lines
