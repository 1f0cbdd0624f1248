"""A fork's test curve on its lineage's axes (the compare page): the parent's points up to the
fork point, then the fork's own, moved to start where it branched off (app/loop/fork.py keeps
that place in the fork's config). A fork of a fork carries its grandparent's points too."""

from sqlmodel import Session

from app.db.schema import Run
from app.read.curves import measured, test_points, x_value


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
