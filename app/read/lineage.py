"""A run's harness lineage: every harness its harness phases saw (the incoming ones and every
candidate, invalid ones included), the parent edges between them, each one's score on the
harness split under the checkpoint of its own phase, which ones the phases accepted, and the
run's checkpoint chain. /runs/{id}/lineage draws it; /api/runs/{id}/lineage returns it.
"""

from typing import Any

from sqlalchemy.orm import defer
from sqlmodel import Session, col, or_, select

from app.db.schema import Checkpoint, Evaluation, Harness, Phase, Run, TrainingJob
from app.read.checkpoints import checkpoint_ref, lineage
from app.read.common import NotFound
from app.read.dashboard import forkable

NODE_FIELDS = (
    "id",
    "name",
    "proposer",
    "valid",
    "error",
    "axis",
    "hypothesis",
    "parent_id",
    "run_id",
)


def _phase_row(phase: Phase, checkpoints: dict[int, Checkpoint], index: int) -> dict[str, Any]:
    checkpoint = checkpoints.get(phase.checkpoint_in_id)
    return {
        "id": phase.id,
        "index": index,
        "round": phase.round,
        "status": phase.status,
        "ended_reason": phase.ended_reason,
        "harness_in_id": phase.harness_in_id,
        "harness_out_id": phase.harness_out_id,
        "checkpoint": checkpoint_ref(checkpoint) if checkpoint else None,
    }


def _home(harness: Harness, phases: list[Phase]) -> tuple[Phase | None, int | None]:
    """The phase a harness belongs to and its iteration there: the phase that proposed it, or
    for an incoming harness proposed elsewhere (the seed), the first phase it entered (iteration
    0 re-evaluates it)."""
    for phase in phases:
        if harness.phase_id == phase.id:
            return phase, harness.iteration
    for phase in phases:
        if phase.harness_in_id == harness.id:
            return phase, 0
    return None, None


def _checkpoint_chain(s: Session, run_id: int, phases: list[Phase]) -> list[dict[str, Any]]:
    """Base -> ... -> the newest checkpoint the run's phases or RFT steps used or made."""
    jobs = s.exec(select(TrainingJob).where(TrainingJob.run_id == run_id)).all()
    ids = {p.checkpoint_in_id for p in phases} | {p.checkpoint_out_id for p in phases}
    ids |= {j.checkpoint_in_id for j in jobs} | {j.checkpoint_out_id for j in jobs}
    ids.discard(None)
    if not ids:  # a run without phases (e.g. an evaluation): the checkpoints it evaluated
        ids = set(s.exec(select(Evaluation.checkpoint_id).where(Evaluation.run_id == run_id)))
    newest = s.get(Checkpoint, max(ids)) if ids else None  # ids grow: the newest is made last
    return lineage(s, newest) if newest else []


def get_lineage(s: Session, run_id: int) -> dict[str, Any]:
    """{"run", "phases" (harness phases, oldest first), "nodes", "edges" (parent -> child;
    `primary` for the harness it was edited from), "checkpoint_chain"}."""
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound("run", run_id)
    all_phases = s.exec(select(Phase).where(Phase.run_id == run_id).order_by(Phase.id)).all()
    phases = [p for p in all_phases if p.kind == "harness"]
    incoming = {p.harness_in_id for p in phases} | {p.harness_out_id for p in phases}
    harnesses = s.exec(
        select(Harness)
        .options(defer(Harness.code))  # the code is not drawn
        .where(or_(Harness.run_id == run_id, col(Harness.id).in_(incoming - {None})))
        .order_by(Harness.id)
    ).all()
    ids = [h.id for h in harnesses]
    checkpoints = {
        c.id: c
        for c in s.exec(
            select(Checkpoint).where(
                col(Checkpoint.id).in_({p.checkpoint_in_id for p in phases} - {None})
            )
        )
    }
    evaluations = s.exec(
        select(Evaluation)
        .where(
            col(Evaluation.harness_id).in_(ids),
            Evaluation.split == "harness",
            Evaluation.status == "done",
        )
        .order_by(Evaluation.id)
    ).all()
    by_harness: dict[int, list[Evaluation]] = {}
    for evaluation in evaluations:
        by_harness.setdefault(evaluation.harness_id, []).append(evaluation)
    phase_rows = [_phase_row(p, checkpoints, i) for i, p in enumerate(phases)]
    position = {p.id: n for n, p in enumerate(all_phases, 1)}  # as the timeline counts them
    for row in phase_rows:  # "Fork from here" (app/loop/fork.py)
        row["fork_from"] = (
            f"{run.id}:{position[row['id']]}" if forkable(run, row["status"]) else None
        )
    nodes = [_node(h, phases, by_harness.get(h.id, [])) for h in harnesses]
    present = set(ids)
    edges = [
        {"source": parent, "target": node["id"], "primary": parent == node["parent_id"]}
        for node in nodes
        for parent in node["parents"]
        if parent in present
    ]
    return {
        "run": {
            "id": run.id,
            "name": run.name,
            "status": run.status,
            "kind": run.kind,
            "strategy": run.strategy,
        },
        # a fork goes on from its parent's lineage: where it branched off, and from what
        "fork": (run.config or {}).get("fork"),
        "phases": phase_rows,
        "nodes": nodes,
        "edges": edges,
        "checkpoint_chain": _checkpoint_chain(s, run_id, list(all_phases)),
    }


def short_name(harness: Harness) -> str:
    """What tells a harness from its siblings, for a node too small for its whole name: a knobs
    candidate's knob and value ("PROMPT_STYLE=answer_only" for "prompt_style-answer_only"), or
    the name a proposer gave it, without ".py"."""
    name = harness.name.removesuffix(".py")
    axis = harness.axis or ""
    if harness.proposer == "knobs" and axis and name.startswith(f"{axis.lower()}-"):
        return f"{axis}={name[len(axis) + 1 :]}"
    return name


def _node(harness: Harness, phases: list[Phase], mine: list[Evaluation]) -> dict[str, Any]:
    """One harness of the tree; `mine` are its finished harness-split evaluations, oldest first."""
    home, iteration = _home(harness, phases)

    def score_in(phase: Phase) -> Evaluation | None:
        """Its newest finished harness-split evaluation under the phase's checkpoint, one the
        phase made preferred (an earlier phase may have scored it under the same weights)."""
        under = [e for e in mine if e.checkpoint_id == phase.checkpoint_in_id]
        own = [e for e in under if e.phase_id == phase.id]
        return (own or under or [None])[-1]

    score = score_in(home) if home else None
    # Later phases that took it in re-score it under their checkpoint: shown in its tooltip.
    rescored = [
        {"phase_round": p.round, "success": e.mean_at_k}
        for p in phases
        if p is not home and p.harness_in_id == harness.id
        for e in [score_in(p)]
        if e is not None
    ]
    # the harness it was edited from first, then any others it drew on
    first = [harness.parent_id] if harness.parent_id is not None else []
    parents = list(dict.fromkeys(first + list(harness.parent_ids or [])))
    return {
        **{k: getattr(harness, k) for k in NODE_FIELDS},
        "label": short_name(harness),
        "parents": parents,
        "phase_id": home.id if home else None,
        "phase_round": home.round if home else None,
        "iteration": iteration,
        "success": score.mean_at_k if score else None,
        "mean_turns": score.mean_turns if score else None,
        "evaluation_id": score.id if score else None,
        "rescored": rescored,
        "accepted": any(p.harness_out_id == harness.id for p in phases),
        "accepted_in": [p.round for p in phases if p.harness_out_id == harness.id],
        "incoming_in": [p.round for p in phases if p.harness_in_id == harness.id],
    }
