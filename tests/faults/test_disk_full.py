"""The disk holding the store fills up while a loop writes rollouts and steps: writes wait (none
is dropped), the loop starts no new rollout and asks for a pause naming the cause, reads keep
answering; once there is room the pause lands, `resume` continues and the run finishes whole."""

import asyncio
import errno
import json
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlmodel import select

from app import control
from app.db import Writer, open_engine, read_session
from app.db.schema import Checkpoint, Event, Rollout, Run, TrainingJob
from app.loop.driver import Loop, start_experiment_run
from app.loop.experiment_file import config_hash, incoming_harness, parse
from tests.conftest import MISSING, attached_settings, started_workbench
from tests.loop.conftest import quick_toml, store_invariants


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB filesystem of its own (tmpfs), to fill."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"{MISSING}mounting a tmpfs (root): {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no room left; returns it (delete it to free the room)."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    for size in (1 << 16, 1 << 12, 1):  # the last bytes too: nothing is left for a write
        try:
            with open(filler, "ab", buffering=0) as f:
                while True:
                    f.write(b"\0" * size)
        except OSError:
            pass
    return filler


async def started_loop(wb, source: str):
    """A new run of the experiment `source` and the task driving its loop."""
    experiment = parse(source)
    with wb.session() as s:
        incoming = incoming_harness(experiment, s)
    run = await start_experiment_run(wb, experiment, source, config_hash(source), incoming)
    return run, asyncio.create_task(Loop(wb, run.id).run())


def test_a_full_store_holds_writes_until_there_is_room_and_drops_none(small_disk):
    engine = open_engine(small_disk / "whale.db")
    writer = Writer(engine)
    run = Run(name="full", kind="experiment", domain="arith", status="running")
    run = asyncio.run(writer.insert(run))
    filler = fill(small_disk)
    for i in range(200):  # steps of a busy rollout, each a few KiB
        writer.append(Event, run_id=run.id, kind="note", detail={"i": i, "pad": "x" * 4000})
    deadline = time.monotonic() + 30
    while writer.full is None:
        assert time.monotonic() < deadline, "the writer never said the disk is full"
        time.sleep(0.05)
    assert "database or disk is full" in writer.full and str(small_disk) in writer.full
    with read_session(engine) as s:  # reads go on meanwhile
        assert s.get(Run, run.id).name == "full"
    filler.unlink()
    writer.flush()
    assert writer.full is None
    with read_session(engine) as s:
        notes = s.exec(select(Event).where(Event.kind == "note")).all()
        assert sorted(e.detail["i"] for e in notes) == list(range(200))
        assert s.execute(text("PRAGMA integrity_check")).scalar() == "ok"
    writer.close()


def test_a_loop_on_a_full_disk_pauses_naming_it_and_resumes_to_its_end(
    small_disk, model_server, model_cache
):
    home = small_disk / "home"
    settings = attached_settings(home, model_server, model_cache)
    source = quick_toml("disk-full", "harness_only", rollouts=16, search={"tasks": 4})

    async def main():
        async with started_workbench(settings) as wb:
            run, loop = await started_loop(wb, source)

            def finished() -> int:
                with wb.session() as s:
                    done = select(Rollout).where(Rollout.status != "pending")
                    return len(s.exec(done).all())

            while finished() < 1:
                assert not loop.done(), loop
                await asyncio.sleep(0.2)
            filler = await asyncio.to_thread(fill, small_disk)
            while wb.writer.full is None:
                assert not loop.done(), loop
                await asyncio.sleep(0.1)
            await asyncio.sleep(3)  # held: the rollouts in flight wait on their writes
            with wb.session() as s:  # and the store still reads
                assert s.get(Run, run.id).status == "running"
            filler.unlink()
            # the loop's own pause lands once there is room; the run stays paused
            while True:
                with wb.session() as s:
                    if s.get(Run, run.id).status == "paused":
                        break
                assert not loop.done(), loop
                await asyncio.sleep(0.2)
            await control.apply(wb.writer, run.id, "resume", "room again", source="test")
            await asyncio.wait_for(loop, 600)
            return run.id

    run_id = asyncio.run(main())
    store_invariants(home / "whale.db")
    engine = open_engine(home / "whale.db")
    with read_session(engine) as s:
        assert s.get(Run, run_id).status == "done"
        pauses = [
            e.detail
            for e in s.exec(select(Event).where(Event.kind == "control")).all()
            if e.detail["action"] == "pause"
        ]
        assert [p["source"] for p in pauses] == ["loop"]
        assert pauses[0]["reason"].startswith("the disk is full: ")
        assert str(small_disk) in pauses[0]["reason"]


def test_a_training_with_no_room_for_its_checkpoint_pauses_the_run_and_trains_again_on_resume(
    tmp_path, model_server, model_cache
):
    """The checkpoints live on a 256 KiB disk of their own (the store has room): the step's
    adapter and tokenizer do not fit. The run pauses naming the path, registers no half checkpoint,
    counts no failed try; once the disk is grown and the run resumed, the step trains and the
    run ends `done`."""
    from tests.training.test_rft import ORACLE

    home = tmp_path / "home"
    checkpoints = home / "checkpoints"
    checkpoints.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(checkpoints)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"{MISSING}mounting a tmpfs (root): {mounted.stderr.decode().strip()}")
    settings = attached_settings(home, model_server, model_cache)
    source = quick_toml(
        "training-disk-full", "weight_only", rollouts=8, test={"at_start": "false"}
    ).replace('domain = "arith"', f'domain = "arith"\nharness_code = {json.dumps(ORACLE)}')

    async def main():
        async with started_workbench(settings) as wb:
            run, loop = await started_loop(wb, source)
            while True:
                with wb.session() as s:
                    if s.get(Run, run.id).status == "paused":
                        job = s.exec(select(TrainingJob)).one()
                        registered = s.exec(select(Checkpoint)).all()
                        break
                assert not loop.done(), loop
                await asyncio.sleep(0.5)
            assert job.status == "training"
            assert [c.training_job_id for c in registered] == [None]  # the base alone
            # the half-written weights are gone, and the room they took
            assert [p for p in checkpoints.rglob("*") if p.is_file()] == []
            grown = subprocess.run(
                ["mount", "-o", "remount,size=4g", str(checkpoints)], capture_output=True
            )
            assert grown.returncode == 0, grown.stderr
            await control.apply(wb.writer, run.id, "resume", "room again", source="test")
            await asyncio.wait_for(loop, 600)
            return run.id

    try:
        run_id = asyncio.run(main())
        store_invariants(home / "whale.db")  # the new checkpoint's files, on the small disk, load
        engine = open_engine(home / "whale.db")
        with read_session(engine) as s:
            assert s.get(Run, run_id).status == "done"
            job = s.exec(select(TrainingJob)).one()
            assert job.status == "done" and job.checkpoint_out_id is not None
            events = s.exec(select(Event)).all()
        engine.dispose()
    finally:
        subprocess.run(["umount", "-l", str(checkpoints)], check=False)
    pauses = [e.detail for e in events if e.kind == "control" and e.detail["action"] == "pause"]
    assert [p["source"] for p in pauses] == ["loop"]
    assert pauses[0]["reason"].startswith(f"the disk is full: training job {job.id}")
    assert str(checkpoints) in pauses[0]["reason"]
    assert "No space left on device" in pauses[0]["reason"]
    assert not [e for e in events if e.kind == "training_retry"]  # no try was spent
