"""Forks as the read side sees them (app/loop/fork.py makes them): which runs may be forked,
where a run stood after its first n phases, a fork's link to its parent as `whale check` checks
it, and a fork's test curve on its lineage's axes (the compare page): the parent's points up to
the fork point, then the fork's own, moved to start where it branched off. A fork of a fork
carries its grandparent's points too."""

from sqlmodel import Session, select

from app.db.schema import Checkpoint, Harness, Phase, Run
from app.read.curves import measured, test_points, x_value

FORKABLE = ("done", "stopped", "failed", "paused")  # nothing of these moves under the fork


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


def imported_fork(run: Run) -> bool:
    """A run `whale import` brought in as a fork of a run of another store: its fork point is
    only a record ("forked_in_export", app/report/import_run.py), which no fork of it goes on
    from (the rounds before it, the spending), so it is not forked here."""
    return "forked_in_export" in (run.config or {})


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


def lineage_curve(s: Session, run: Run, x: str) -> list[dict]:
    """measured()'s points of the run; a fork's preceded by its ancestors' up to its fork point
    (`inherited`: True), its own shifted along x by the fork point's place on the root run's
    axis, each naming its `run_id`."""
    points = measured(s, run, x)
    fork = (run.config or {}).get("fork")
    if not fork:
        return points
    shift = fork["offset"][x]
    own = [{**p, "x": p["x"] + shift, "run_id": run.id} for p in points]
    parent = s.get(Run, fork["run_id"])
    if parent is None:  # `whale check` names the broken link; the fork's curve still draws
        return own
    at = fork["at"]
    # the parent's points before the fork point: a prefix of its own, as they were recorded (a
    # pair measured again is plotted again: the evaluation alone does not say which point)
    before_fork = sum(
        1
        for m in test_points(s, parent.id)
        if x_value(m, x) is not None
        and m.rollouts <= at["rollouts"]
        and (m.weight_steps or 0) <= at["weight_steps"]
    )
    curve = lineage_curve(s, parent, x)
    theirs = [p for p in curve if p.get("inherited")]
    mine = [p for p in curve if not p.get("inherited")][:before_fork]
    return [{"run_id": parent.id, **p, "inherited": True} for p in theirs + mine] + own
