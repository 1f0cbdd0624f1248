import sqlite3
import threading

import pytest
from sqlalchemy.exc import IntegrityError
from sqlmodel import SQLModel, select

from app.db import open_engine, read_session
from app.db.migrations import MIGRATIONS
from app.db.schema import Event, Run, Step


def test_migrations_are_recorded_and_run_once(tmp_path):
    path = tmp_path / "whale.db"
    open_engine(path).dispose()
    open_engine(path).dispose()  # a second open must not re-apply anything
    with sqlite3.connect(path) as conn:
        names = [n for (n,) in conn.execute("SELECT name FROM migration ORDER BY name")]
        assert names == [name for name, _ in MIGRATIONS]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_schema_matches_the_migrated_database(tmp_path):
    path = tmp_path / "whale.db"
    open_engine(path).dispose()
    with sqlite3.connect(path) as conn:
        for table in SQLModel.metadata.tables.values():
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table.name})")}
            assert columns == {c.name for c in table.columns}, table.name


def test_writer_returns_ids_and_readers_see_commits(store):
    engine, writer = store

    def create(s):
        run = Run(name="r", kind="eval", domain="arith")
        s.add(run)
        return run

    run = writer.submit(create).result()
    assert run.id is not None
    with read_session(engine) as s:
        assert s.get(Run, run.id).name == "r"


def test_a_failing_write_does_not_undo_its_batch_mates(store):
    engine, writer = store
    good = writer.add(Event(kind="before"))
    bad = writer.add(Step(rollout_id=999_999, idx=0, kind="model"))  # no such rollout (FK)
    after = writer.add(Event(kind="after"))
    good.result(), after.result()
    with pytest.raises(IntegrityError, match="FOREIGN KEY"):
        bad.result()
    with read_session(engine) as s:
        assert sorted(e.kind for e in s.exec(select(Event))) == ["after", "before"]


def test_many_threads_write_through_one_writer(store):
    engine, writer = store

    def burst(n):
        futures = [writer.add(Event(kind=f"t{n}", detail={"i": i})) for i in range(200)]
        for f in futures:
            f.result()

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with read_session(engine) as s:
        assert len(s.exec(select(Event)).all()) == 800


def test_large_json_is_stored_compressed_and_reads_back(store, tmp_path):
    engine, writer = store
    messages = [{"role": "user", "content": "the same words again " * 2000}]
    run = writer.submit(lambda s: _add_run(s)).result()
    writer.add(Event(run_id=run.id, kind="big", detail={"messages": messages})).result()
    with read_session(engine) as s:
        assert s.exec(select(Event)).one().detail == {"messages": messages}
    with sqlite3.connect(tmp_path / "whale.db") as conn:
        (size,) = conn.execute("SELECT length(detail) FROM event").fetchone()
    assert size < len(messages[0]["content"]) / 20


def _add_run(s):
    run = Run(name="r", kind="eval", domain="arith")
    s.add(run)
    return run


def test_a_write_whose_caller_is_cancelled_lands_and_the_writer_goes_on(store):
    """A task awaiting a write is cancelled while the write runs (a shutdown, a SIGTERM): the
    write still lands, and so does every later one (the writer thread does not die on it)."""
    import asyncio
    import time

    engine, writer = store
    running = threading.Event()

    def slow(s):
        running.set()
        time.sleep(0.3)  # the caller is cancelled meanwhile
        s.add(Run(name="cancelled caller", kind="eval", domain="arith"))

    async def main():
        caller = asyncio.ensure_future(writer.run(slow))
        await asyncio.to_thread(running.wait)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        # a dead writer thread would never answer
        return await asyncio.wait_for(writer.insert(Event(kind="after", detail={})), 10)

    after = asyncio.run(main())
    with read_session(engine) as s:
        assert [r.name for r in s.exec(select(Run))] == ["cancelled caller"]
        assert s.get(Event, after.id).kind == "after"
