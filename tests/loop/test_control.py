"""Control requests against a real store: accepted ones change the run and are logged,
conflicting ones are refused with a reason, logged, and change nothing."""

import asyncio

import pytest
from sqlmodel import Session, select

from app import control
from app.db.schema import Checkpoint, Event, Harness, Run


@pytest.fixture
def loop_run(store):
    """A running experiment run with a valid and an invalid harness and a checkpoint."""
    engine, writer = store

    def create(s):
        run = Run(name="x", kind="experiment", domain="arith", status="running", desired="running")
        s.add(run)
        s.flush()
        good = Harness(run_id=run.id, name="good.py", code="", sha="a")
        bad = Harness(run_id=run.id, name="bad.py", code="", sha="b", valid=False, error="syntax")
        ckpt = Checkpoint(run_id=run.id, name="m")
        s.add_all([good, bad, ckpt])
        s.flush()
        return run.id, good.id, bad.id, ckpt.id

    return engine, writer, *writer.submit(create).result()


def act(writer, run_id, action, **args):
    return asyncio.run(control.apply(writer, run_id, action, "because", "test", **args))


def state(engine, run_id):
    with Session(engine) as s:
        run = s.get(Run, run_id)
        events = s.exec(select(Event).where(Event.run_id == run_id).order_by(Event.id)).all()
        return run, [(e.kind, e.detail["action"], e.detail.get("why")) for e in events]


def test_pause_resume_stop_change_what_the_run_is_asked_to_do(loop_run):
    engine, writer, run_id, *_ = loop_run
    act(writer, run_id, "pause")
    assert state(engine, run_id)[0].desired == "paused"
    with pytest.raises(control.Refused, match="already paused"):
        act(writer, run_id, "pause")
    act(writer, run_id, "resume")
    with pytest.raises(control.Refused, match="not paused"):
        act(writer, run_id, "resume")
    act(writer, run_id, "stop")
    with pytest.raises(control.Refused, match="the run is stopping"):
        act(writer, run_id, "pause")  # pause while stopping
    writer.flush()
    run, events = state(engine, run_id)
    assert run.desired == "stopped"
    assert events == [
        ("control", "pause", None),
        ("control_refused", "pause", "the run is already paused"),
        ("control", "resume", None),
        ("control_refused", "resume", "the run is not paused"),
        ("control", "stop", None),
        ("control_refused", "pause", "the run is stopping"),
    ]


def test_one_shot_commands_wait_one_at_a_time_and_never_during_resume(loop_run):
    engine, writer, run_id, *_ = loop_run
    act(writer, run_id, "skip")
    assert state(engine, run_id)[0].command == {"action": "skip"}
    with pytest.raises(control.Refused, match="a skip is already waiting"):
        act(writer, run_id, "force", kind="harness")
    writer.submit(lambda s: setattr(s.get(Run, run_id), "command", None)).result()
    writer.submit(lambda s: setattr(s.get(Run, run_id), "status", "resuming")).result()
    with pytest.raises(control.Refused, match="resuming after a restart"):
        act(writer, run_id, "skip")  # skip during resume
    assert state(engine, run_id)[0].command is None


def test_force_and_promote_check_their_arguments(loop_run):
    engine, writer, run_id, good, bad, ckpt = loop_run
    with pytest.raises(control.Refused, match="force needs kind"):
        act(writer, run_id, "force", kind="sideways")
    with pytest.raises(control.Refused, match=f"harness {bad} is invalid: syntax"):
        act(writer, run_id, "promote", harness_id=bad)
    with pytest.raises(control.Refused, match="is not part of run"):
        act(writer, run_id, "promote", harness_id=10_000)
    with pytest.raises(control.Refused, match="one of harness_id or checkpoint_id"):
        act(writer, run_id, "promote")
    act(writer, run_id, "promote", harness_id=good)
    assert state(engine, run_id)[0].command == {"action": "promote", "harness_id": good}


def test_finished_runs_and_single_phase_runs_cannot_be_steered(loop_run):
    engine, writer, run_id, *_ = loop_run
    writer.submit(lambda s: setattr(s.get(Run, run_id), "status", "done")).result()
    with pytest.raises(control.Refused, match="the run is done"):
        act(writer, run_id, "pause")
    eval_id = writer.submit(lambda s: _add(s, Run(name="e", kind="eval", domain="arith"))).result()
    with pytest.raises(control.Refused, match="not a loop"):
        act(writer, eval_id, "stop")
    with pytest.raises(control.NoSuchRun, match="no run 99999"):
        act(writer, 99_999, "stop")
    with engine.connect() as db:  # nothing is logged for a run that does not exist
        assert db.exec_driver_sql("SELECT count(*) FROM event WHERE run_id = 99999").scalar() == 0


def _add(s, row):
    s.add(row)
    s.flush()
    return row.id
