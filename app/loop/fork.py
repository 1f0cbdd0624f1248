"""Forking a run: a new run that starts where another stood after one of its phases - the
harness that phase handed on and its checkpoint - with the same or an edited experiment
(`whale run FILE --from RUN:PHASE`, the start form's "fork from"; docs/loop.md, "Forks").

The fork point is resolved once, when the child is created, and kept in the child's config
("fork"): the parent's harness and checkpoint there (the child starts from those very rows),
what the parent's budgets had counted by then, the kinds of the phases before it (so the
child's strategy goes on from there: a WHALE fork after a weight phase starts with a harness
phase) and where the child's curve starts on the parent's axes. The parent is only read.
"""

import re

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.db.schema import Checkpoint, Evaluation, Harness, Phase, Run, SearchIteration, utc
from app.loop.experiment_file import ExperimentError
from app.rollout.usage import USAGE_FIELDS, carried, spent, weight_steps_done

FORKABLE = ("done", "stopped", "failed", "paused")  # nothing of these moves under the fork
POINT = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
AXES = ("rollouts", "weight_steps", "wall_s")  # the curve's x axes (app/read/curves.py)


class ForkError(ExperimentError):
    """The fork point names no phase boundary a run can start from; nothing was created."""


def parse_point(text: str) -> tuple[int, int]:
    """(run id, phase) of "RUN:PHASE"; PHASE counts the run's phases from 1 as its timeline
    shows them (0: the run's start)."""
    match = POINT.match(text or "")
    if not match:
        raise ForkError(f"--from: RUN:PHASE, e.g. 3:2 (run 3 after its second phase), not {text!r}")
    return int(match[1]), int(match[2])


def phases_of(s: Session, run_id: int) -> list[Phase]:
    return list(s.exec(select(Phase).where(Phase.run_id == run_id).order_by(Phase.id)))


def boundary(run: Run, phases: list[Phase], n: int) -> tuple[int, int]:
    """(harness id, checkpoint id) the run stood at after its first n phases: what its next
    phase would have started from (app/loop/driver.py, Loop._current)."""
    start = run.config["start"]
    harness_id, checkpoint_id = start["harness_id"], start["checkpoint_id"]
    for phase in phases[:n]:
        harness_id = phase.harness_out_id or harness_id
        checkpoint_id = phase.checkpoint_out_id or checkpoint_id
    return harness_id, checkpoint_id


def fork_point(s: Session, run_id: int, n: int, domain: str) -> dict:
    """The fork point after phase n of run `run_id`, as the child keeps it; ForkError says why
    there is none (no such run or phase, a phase not finished, weights dropped...)."""
    from app.read.invariants import checkpoint_problem

    parent = s.get(Run, run_id)
    if parent is None or parent.kind != "experiment":
        raise ForkError(f"--from {run_id}:{n}: no experiment run {run_id} in this store")
    if parent.status not in FORKABLE:
        raise ForkError(
            f"--from {run_id}:{n}: run {run_id} is {parent.status}; a fork starts from a "
            f"finished or paused run ({', '.join(FORKABLE)})"
        )
    if parent.domain != domain:
        raise ForkError(
            f"--from {run_id}:{n}: run {run_id} is on {parent.domain}, the experiment on {domain}"
        )
    phases = phases_of(s, run_id)
    if n > len(phases) or parent.config["start"].get("checkpoint_id") is None:
        raise ForkError(f"--from {run_id}:{n}: run {run_id} has {len(phases)} phases")
    if n and phases[n - 1].status != "done":
        raise ForkError(
            f"--from {run_id}:{n}: phase {n} of run {run_id} is {phases[n - 1].status}, "
            "not done: its end is no boundary to start from"
        )
    harness_id, checkpoint_id = boundary(parent, phases, n)
    checkpoint = s.get(Checkpoint, checkpoint_id)
    problem = (
        "retention dropped its weights"
        if checkpoint.weights_dropped_at is not None
        else checkpoint_problem(checkpoint)
    )
    if problem:
        raise ForkError(f"--from {run_id}:{n}: checkpoint {checkpoint_id}: {problem}")
    own = spent_by(s, parent, phases[:n])
    before = carried(s, run_id)
    inherited = (parent.config.get("fork") or {}).get("offset") or {}
    return {
        "run_id": run_id,
        "phase": n,
        "phase_id": phases[n - 1].id if n else None,
        "harness_id": harness_id,
        "harness_sha": s.get(Harness, harness_id).sha,
        "checkpoint_id": checkpoint_id,
        # the parent's budgets at the fork point (a fork of a fork: its own carried ones too)
        "spent": {k: own[k] + before.get(k, 0) for k in (*USAGE_FIELDS, "wall_s")},
        # the fork point on the parent's curve axes, and on its root's (the compare page)
        "at": {axis: own[axis] for axis in AXES},
        "offset": {axis: own[axis] + inherited.get(axis, 0) for axis in AXES},
        "kinds": [
            *(parent.config.get("fork") or {}).get("kinds", []),
            *(p.kind for p in phases[:n]),
        ],
    }


def spent_by(s: Session, run: Run, phases: list[Phase]) -> dict[str, float]:
    """What the run itself had used by the end of these phases (its first ones), in the units
    of its budgets and curve axes."""
    ids = [p.id for p in phases]
    if not ids:
        return dict.fromkeys((*USAGE_FIELDS, "wall_s"), 0)
    _, tokens = spent(s, Evaluation.run_id == run.id, col(Evaluation.phase_id).in_(ids))
    proposer_tokens, usd, proposing = s.exec(
        select(
            func.coalesce(
                func.sum(SearchIteration.prompt_tokens + SearchIteration.completion_tokens), 0
            ),
            func.coalesce(func.sum(SearchIteration.cost_usd), 0.0),
            func.count().filter(SearchIteration.iteration > 0),
        ).where(
            col(SearchIteration.phase_id).in_(ids),
            col(SearchIteration.status).in_(("done", "failed")),
        )
    ).one()
    end = utc(phases[-1].finished_at)
    return {
        "rollouts": sum(p.rollouts for p in phases),
        "tokens": tokens + proposer_tokens,
        "proposer_usd": usd,
        "weight_steps": weight_steps_done(s, run.id, ids),
        "proposing_iterations": proposing,
        "wall_s": (end - utc(run.created_at)).total_seconds() if end else 0.0,
    }


def fork_of(run: Run) -> tuple[int, int] | None:
    """(parent run, phase) a run was forked from, or None."""
    return None if run.parent_run_id is None else (run.parent_run_id, run.fork_phase)


def link_problems(s: Session, run: Run) -> list[str]:
    """What breaks a fork's link to its parent (`whale check`): the parent is gone, or the
    fork point's harness or checkpoint is not what the child started from or is gone."""
    fork = (run.config or {}).get("fork")
    if run.parent_run_id is None and not fork:
        return []
    if not fork or fork.get("run_id") != run.parent_run_id or fork.get("phase") != run.fork_phase:
        return [f"run {run.id}: its parent columns and its config's fork record disagree"]
    parent = s.get(Run, run.parent_run_id)
    if parent is None:
        return [f"run {run.id}: its parent run {run.parent_run_id} is not in the store"]
    phases = phases_of(s, parent.id)
    n = run.fork_phase
    if n > len(phases) or (n and phases[n - 1].status != "done"):
        return [f"run {run.id}: phase {n} of run {parent.id} is missing or not done"]
    broken = []
    harness_id, checkpoint_id = boundary(parent, phases, n)
    start = run.config.get("start") or {}
    harness = s.get(Harness, harness_id)
    if harness_id != fork["harness_id"] or start.get("harness_id") != harness_id:
        broken.append(
            f"run {run.id}: starts from harness {start.get('harness_id')}, the fork point "
            f"{parent.id}:{n} holds harness {harness_id}"
        )
    elif harness is None or harness.sha != fork["harness_sha"]:
        broken.append(f"run {run.id}: the fork point's harness {harness_id} changed or is gone")
    started = start.get("checkpoint_id")
    if checkpoint_id != fork["checkpoint_id"] or started not in (None, checkpoint_id):
        broken.append(
            f"run {run.id}: starts from checkpoint {started}, the fork point {parent.id}:{n} "
            f"holds checkpoint {checkpoint_id}"
        )
    elif s.get(Checkpoint, checkpoint_id) is None:
        broken.append(f"run {run.id}: the fork point's checkpoint {checkpoint_id} is gone")
    return broken
