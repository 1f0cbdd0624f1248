"""A fork's test curve on its lineage's axes (the compare page): the parent's points up to the
fork point, then the fork's own, moved to start where it branched off (app/loop/fork.py keeps
that place in the fork's config). A fork of a fork carries its grandparent's points too."""

from sqlmodel import Session

from app.db.schema import Run
from app.read.curves import measured, test_points


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
    before_fork = {
        m.evaluation_id
        for m in test_points(s, parent.id)
        if m.rollouts <= at["rollouts"] and (m.weight_steps or 0) <= at["weight_steps"]
    }
    inherited = [
        {"run_id": parent.id, **p, "inherited": True}
        for p in lineage_curve(s, parent, x)
        if p.get("inherited") or p.get("evaluation_id") in before_fork
    ]
    return inherited + own
