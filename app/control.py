"""Steering a run: pause, resume, stop, skip, force, promote.

A request is checked against the run's state and either refused with a message (nothing
changes) or written to the run (`desired` for pause/resume/stop, `command` for the one-shot
actions) together with an event in the run's log. The loop reads them from the database, so the
API, `whale pause RUN` from another shell and a restarted server all steer it the same way.
"""

from sqlmodel import Session

from app.db.schema import Checkpoint, Event, Harness, Run

ACTIONS = ("pause", "resume", "stop", "skip", "force", "promote")
FINISHED = ("stopped", "done", "failed")


class Refused(ValueError):
    """The action conflicts with the run's state; the message says why."""


class NoSuchRun(Refused):
    """There is no run of that id: nothing to refuse in its log either."""

    def __init__(self, run_id: int):
        super().__init__(f"no run {run_id}")
        self.run_id = run_id


async def apply(
    writer, run_id: int, action: str, reason: str = "", source: str = "api", **args
) -> Event:
    """Apply a control request, or raise Refused; either way the run's log records it."""
    detail = {"action": action, "reason": reason, "source": source, **args}
    try:
        return await writer.run(lambda s: _request(s, run_id, action, detail, args))
    except NoSuchRun:
        raise
    except Refused as exc:
        writer.add(Event(run_id=run_id, kind="control_refused", detail={**detail, "why": str(exc)}))
        raise


def _request(s: Session, run_id: int, action: str, detail: dict, args: dict) -> Event:
    run = s.get(Run, run_id)
    if run is None:
        raise NoSuchRun(run_id)
    check(s, run, action, args)
    if action == "pause":
        run.desired = "paused"
    elif action == "resume":
        run.desired = "running"
    elif action == "stop":
        run.desired = "stopped"
    else:
        run.command = {"action": action, **args}
    event = Event(run_id=run_id, kind="control", detail=detail)
    s.add(event)
    return event


def check(s: Session, run: Run, action: str, args: dict) -> None:
    """Raise Refused when the run would not take this action now (also asked by the UI, which
    greys out such buttons)."""
    if run.kind != "experiment":
        raise Refused(f"run {run.id} is a single {run.kind}, not a loop: nothing to steer")
    if action not in ACTIONS:
        raise Refused(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
    if run.status in FINISHED:
        raise Refused(f"the run is {run.status}")
    if run.desired == "stopped":
        raise Refused("the run is stopping")
    if action == "pause" and run.desired == "paused":
        raise Refused("the run is already paused")
    if action == "resume" and run.desired != "paused":
        raise Refused("the run is not paused")
    if action in ("skip", "force", "promote"):
        if run.status == "resuming":
            raise Refused("the run is resuming after a restart: wait until it runs")
        if run.command:
            raise Refused(f"a {run.command['action']} is already waiting to be taken")
    if action == "force" and args.get("kind") not in ("weight", "harness"):
        raise Refused("force needs kind = weight or harness")
    if action == "promote":
        _check_promote(s, run, args)


def _check_promote(s: Session, run: Run, args: dict) -> None:
    harness_id, checkpoint_id = args.get("harness_id"), args.get("checkpoint_id")
    if (harness_id is None) == (checkpoint_id is None):
        raise Refused("promote needs one of harness_id or checkpoint_id")
    if harness_id is not None:
        harness = s.get(Harness, harness_id)
        if harness is None or harness.run_id != run.id:
            raise Refused(f"harness {harness_id} is not part of run {run.id}")
        if not harness.valid:
            raise Refused(f"harness {harness_id} is invalid: {harness.error}")
    else:
        checkpoint = s.get(Checkpoint, checkpoint_id)
        if checkpoint is None or checkpoint.run_id not in (None, run.id):
            raise Refused(f"checkpoint {checkpoint_id} is not part of run {run.id}")
        if checkpoint.weights_dropped_at is not None:  # [rft] keep_last, keep_every
            raise Refused(f"checkpoint {checkpoint_id}'s weights were dropped: it cannot be served")
