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
import tomllib

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.db.schema import Checkpoint, Evaluation, Harness, Phase, Run, SearchIteration, utc
from app.loop.experiment_file import ExperimentError
from app.read.forks import FORKABLE, boundary, imported_fork, phases_of
from app.rollout.usage import USAGE_FIELDS, carried, spent, weight_steps_done

POINT = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
AXES = ("rollouts", "weight_steps", "wall_s")  # the curve's x axes (app/read/curves.py)
TABLE = re.compile(r"^\s*\[")  # a table's header: the top-level keys end there


class ForkError(ExperimentError):
    """The fork point names no phase boundary a run can start from; nothing was created."""


def parse_point(text: str) -> tuple[int, int]:
    """(run id, phase) of "RUN:PHASE"; PHASE counts the run's phases from 1 as its timeline
    shows them (0: the run's start)."""
    match = POINT.match(text or "")
    if not match:
        raise ForkError(f"--from: RUN:PHASE, e.g. 3:2 (run 3 after its second phase), not {text!r}")
    return int(match[1]), int(match[2])


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
    if imported_fork(parent):
        raise ForkError(
            f"--from {run_id}:{n}: run {run_id} was imported as a fork of a run not in this store "
            "(its rounds and spending before its fork point are only a record here): fork it in "
            "the store it was made in"
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


def experiment_as_it_ran(run: Run) -> str:
    """The experiment text a fork of the run starts from (the start form's): the run's own. A
    run of a seed group keeps the group's file as its source, so its own seed is set there
    (the top-level `seed`, `seeds` gone); the rest of the text is kept byte for byte."""
    config = run.config or {}
    if not config.get("group"):
        return config["source"]
    return with_seed(config["source"], config["experiment"]["seed"])


def with_seed(text: str, seed: int) -> str:
    """The experiment text with its top-level `seed = N` (where its `seed` or `seeds` stood,
    else after its last top-level key) and no `seeds`. A statement is read as TOML itself, so
    one spanning lines (an array, a multi-line string) is kept or dropped whole."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    placed, after_keys, i = False, 0, 0
    while i < len(lines) and not TABLE.match(lines[i]):
        j = i + 1
        while True:  # the text parsed before, so its first statement ends somewhere
            try:
                keys = tomllib.loads("".join(lines[i:j]))
                break
            except tomllib.TOMLDecodeError:
                if j >= len(lines):  # not so: say it rather than loop
                    raise
                j += 1
        if keys.keys() & {"seed", "seeds"}:
            if not placed:
                out.append(f"seed = {seed}\n")
                placed = True
        else:
            out.extend(lines[i:j])
            after_keys = len(out) if keys else after_keys
        i = j
    if not placed:
        if after_keys and not out[after_keys - 1].endswith("\n"):
            out[after_keys - 1] += "\n"
        out.insert(after_keys, f"seed = {seed}\n")
    return "".join(out + lines[i:])
