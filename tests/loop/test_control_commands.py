"""`whale pause|resume|stop|skip|force|promote RUN` as a user types them in another shell: each
writes its request to the store (the loop takes it from there) or is refused with exit code 2
and the reason; every request, taken or refused, is in the run's log."""

import os
import sqlite3
import subprocess

import pytest
from sqlmodel import select

from app.config import Settings
from app.db import Writer, open_engine, read_session
from app.db.schema import Checkpoint, Event, Harness, Run
from tests.conftest import WHALE


@pytest.fixture
def home(tmp_path):
    """A store holding one running experiment run, with a valid and an invalid harness."""
    home = tmp_path / "home"
    Settings(home=home).ensure_dirs()
    engine = open_engine(home / "whale.db")
    writer = Writer(engine)

    def create(s):
        run = Run(
            name="steered", kind="experiment", domain="arith", status="running", desired="running"
        )
        s.add(run)
        s.flush()
        s.add_all(
            [
                Harness(run_id=run.id, name="good.py", code="", sha="a"),
                Harness(
                    run_id=run.id,
                    name="bad.py",
                    code="",
                    sha="b",
                    valid=False,
                    error="syntax error: line 1",
                ),
                Checkpoint(run_id=run.id, name="lora-1"),
            ]
        )

    writer.submit(create).result()
    writer.close()
    engine.dispose()
    return home


def whale(home, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "WHALE_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([WHALE, *args], env=env, capture_output=True, text=True, timeout=120)


def state(home) -> tuple[str, dict | None]:
    """(desired, command) of the run, read as the loop reads them."""
    engine = open_engine(home / "whale.db")
    try:
        with read_session(engine) as s:
            run = s.get(Run, 1)
            return run.desired, run.command
    finally:
        engine.dispose()


def log(home) -> list[tuple[str, str]]:
    engine = open_engine(home / "whale.db")
    try:
        with read_session(engine) as s:
            return [
                (e.kind, e.detail.get("action")) for e in s.exec(select(Event).order_by(Event.id))
            ]
    finally:
        engine.dispose()


def test_each_control_command_is_written_or_refused_with_its_reason(home):
    paused = whale(home, "pause", "1", "--reason", "lunch")
    assert paused.returncode == 0 and "run 1: pause requested" in paused.stdout
    assert state(home)[0] == "paused"

    again = whale(home, "pause", "1")
    assert again.returncode == 2 and "pause refused: the run is already paused" in again.stderr

    assert whale(home, "resume", "1").returncode == 0 and state(home)[0] == "running"
    assert whale(home, "force", "1", "--kind", "harness").returncode == 0
    assert state(home)[1] == {"action": "force", "kind": "harness"}

    waiting = whale(home, "skip", "1")  # one one-shot action at a time
    assert waiting.returncode == 2 and "a force is already waiting to be taken" in waiting.stderr

    with sqlite3.connect(home / "whale.db") as db:  # the loop took the force
        db.execute("UPDATE run SET command = NULL")
    assert whale(home, "skip", "1").returncode == 0

    with sqlite3.connect(home / "whale.db") as db:
        db.execute("UPDATE run SET command = NULL")
    invalid = whale(home, "promote", "1", "--harness", "2")
    assert (
        invalid.returncode == 2 and "harness 2 is invalid: syntax error: line 1" in invalid.stderr
    )
    assert whale(home, "promote", "1", "--harness", "1").returncode == 0
    assert state(home)[1] == {"action": "promote", "harness_id": 1}

    assert whale(home, "stop", "1", "--reason", "enough").returncode == 0
    assert state(home)[0] == "stopped"
    late = whale(home, "resume", "1")
    assert late.returncode == 2 and "the run is stopping" in late.stderr

    assert log(home) == [
        ("control", "pause"),
        ("control_refused", "pause"),
        ("control", "resume"),
        ("control", "force"),
        ("control_refused", "skip"),
        ("control", "skip"),
        ("control_refused", "promote"),
        ("control", "promote"),
        ("control", "stop"),
        ("control_refused", "resume"),
    ]


def test_a_missing_run_or_store_is_named(home, tmp_path):
    missing = whale(home, "stop", "42")
    assert missing.returncode == 2 and "no run 42 in" in missing.stderr
    assert log(home) == []
    nowhere = whale(tmp_path / "no-store", "pause", "1")
    assert nowhere.returncode == 2 and "no store at" in nowhere.stderr
