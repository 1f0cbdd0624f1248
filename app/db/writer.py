"""The single writer: every write goes through one thread that batches them into transactions.

SQLite allows one writer at a time; funnelling writes through a queue turns many small
transactions (a step per model call) into few large ones and removes lock contention within a
process. Between processes (the loop process and the web's, a `whale pause` from a shell) each
transaction takes the write lock as it begins, and waits for it (app/db/engine.py). Rows
appended with `append` skip the ORM altogether: consecutive ones of a table are inserted by one
executemany, which is what lets the gateway record thousands of steps a second.
"""

import asyncio
import errno
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import TypeVar

from pydantic_core import PydanticUndefined
from sqlalchemy import Table
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel

from app.db.engine import writing_engine

log = logging.getLogger(__name__)
T = TypeVar("T")
_STOP = object()
FULL_RETRY_S = 1.0  # how often a write held by a full disk is tried again


class _DiskFull(Exception):
    """A write failed for want of space: the batch waits and is tried again, never dropped."""


def _is_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return "database or disk is full" in str(exc)


class _Row:
    """A row to insert into `table`, without an ORM object (see Writer.append)."""

    __slots__ = ("table", "values")

    def __init__(self, table: Table, values: dict):
        self.table, self.values = table, values


def _defaults(model: type[SQLModel]) -> list[tuple[str, object]]:
    """(field, default or default factory) of a table model: what its constructor would fill."""
    found = []
    for name, field in model.model_fields.items():
        if field.default_factory is not None:
            found.append((name, field.default_factory))
        elif field.default is not PydanticUndefined and name != "id":
            found.append((name, lambda value=field.default: value))
    return found


class Writer:
    def __init__(self, engine: Engine, max_batch: int = 512):
        self.engine = engine
        self._writing = writing_engine(engine)  # its transactions take the write lock first
        self.max_batch = max_batch
        self._queue: queue.Queue = queue.Queue()
        self._defaults: dict[type, list] = {}
        # Why writes wait right now (the disk holding the store is full), else None: the loop
        # holds new rollouts while it is set, the pages keep reading (docs/faults.md).
        self.full: str | None = None
        self._thread = threading.Thread(target=self._loop, name="db-writer", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[Session], T]) -> Future[T]:
        """Run fn(session) in the writer thread, inside a transaction; the future gets its result."""
        fut: Future[T] = Future()
        self._queue.put((fn, fut))
        return fut

    async def run(self, fn: Callable[[Session], T]) -> T:
        return await asyncio.wrap_future(self.submit(fn))

    def append(self, model: type[SQLModel], **values) -> None:
        """Insert one row of `model` without waiting and without building the ORM object (which
        costs more than the insert); defaults are filled as the model's constructor would. A row
        that cannot be inserted is logged and dropped, as a failed `add` is."""
        defaults = self._defaults.get(model)
        if defaults is None:
            defaults = self._defaults[model] = _defaults(model)
        for name, make in defaults:
            if name not in values:
                values[name] = make()
        self._queue.put(_Row(model.__table__, values))

    def add(self, *rows) -> Future[None]:
        """Insert rows without waiting (fire and forget; ordering with later writes is kept)."""
        return self.submit(lambda s: s.add_all(rows))

    async def insert(self, row: T, *more) -> T:
        """Insert rows in one transaction and wait, so they come back with their ids set."""

        def add(s: Session) -> T:
            s.add_all((row, *more))
            s.flush()
            return row

        return await self.run(add)

    def flush(self) -> None:
        self.submit(lambda s: None).result()

    def close(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()
        self._writing.dispose()

    def _loop(self) -> None:
        with Session(self._writing, expire_on_commit=False) as session:
            while True:
                batch = [self._queue.get()]
                while len(batch) < self.max_batch:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = any(item is _STOP for item in batch)
                self._write([item for item in batch if item is not _STOP], session)
                if stop:
                    return

    def _write(self, batch: list, session: Session) -> None:
        """Write the batch; on a full disk, undo it and try it whole again until it fits (every
        item runs again in a fresh transaction: nothing of the failed try was committed)."""
        while True:
            try:
                self._write_once(batch, session)
            except _DiskFull as exc:
                session.rollback()
                if self.full is None:
                    log.error("the store's disk is full; writes wait: %s", exc.__cause__)
                self.full = f"{exc.__cause__} (the store: {self.engine.url.database})"
                time.sleep(FULL_RETRY_S)
                continue
            if self.full is not None:
                log.warning("the store's disk has room again; writes go on")
                self.full = None
            return

    def _write_once(self, batch: list, session: Session) -> None:
        results = []
        rows: list[_Row] = []  # consecutive appended rows of one table: one executemany, in order
        for item in batch + [None]:
            if isinstance(item, _Row):
                if rows and rows[0].table is not item.table:
                    self._insert(rows, session)
                    rows = []
                rows.append(item)
                continue
            if rows:
                self._insert(rows, session)
                rows = []
            if item is None:
                break
            fn, fut = item
            # A savepoint per item: one failing write does not undo its batch-mates.
            try:
                with session.begin_nested():
                    result = fn(session)
                    session.flush()
                results.append((fut, result, None))
            except Exception as exc:  # noqa: BLE001 - handed to the caller through the future
                if _is_full(exc):
                    raise _DiskFull() from exc
                log.warning("write failed: %s", exc)
                results.append((fut, None, exc))
        try:
            session.commit()
        except Exception as exc:  # noqa: BLE001
            if _is_full(exc):
                raise _DiskFull() from exc
            session.rollback()
            results = [(fut, None, exc) for fut, _, _ in results]
        session.expunge_all()  # returned rows stay usable; the identity map does not grow
        for fut, result, exc in results:
            try:
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
            except InvalidStateError:  # its caller was cancelled meanwhile: the write stands
                pass

    @staticmethod
    def _insert(rows: list[_Row], session: Session) -> None:
        """One executemany; if it fails, row by row, so that one bad row loses only itself."""
        try:
            with session.begin_nested():
                session.execute(rows[0].table.insert(), [r.values for r in rows])
            return
        except Exception as exc:  # noqa: BLE001 - narrowed down below
            if _is_full(exc):
                raise _DiskFull() from exc
        for row in rows:
            try:
                with session.begin_nested():
                    session.execute(row.table.insert(), [row.values])
            except Exception as exc:  # noqa: BLE001 - fire and forget: logged, nothing waits
                if _is_full(exc):
                    raise _DiskFull() from exc
                log.warning("insert into %s failed: %s", row.table.name, exc)
