"""The single writer: every write goes through one thread that batches them into transactions.

SQLite allows one writer at a time; funnelling writes through a queue turns many small
transactions (a step per model call) into few large ones and removes lock contention.
"""
import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from sqlalchemy.engine import Engine
from sqlmodel import Session

log = logging.getLogger(__name__)
T = TypeVar("T")
_STOP = object()


class Writer:
    def __init__(self, engine: Engine, max_batch: int = 512):
        self.engine = engine
        self.max_batch = max_batch
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="db-writer", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[Session], T]) -> Future[T]:
        """Run fn(session) in the writer thread, inside a transaction; the future gets its result."""
        fut: Future[T] = Future()
        self._queue.put((fn, fut))
        return fut

    async def run(self, fn: Callable[[Session], T]) -> T:
        return await asyncio.wrap_future(self.submit(fn))

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

    def _loop(self) -> None:
        with Session(self.engine, expire_on_commit=False) as session:
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
        results = []
        for fn, fut in batch:
            # A savepoint per item: one failing write does not undo its batch-mates.
            try:
                with session.begin_nested():
                    result = fn(session)
                    session.flush()
                results.append((fut, result, None))
            except Exception as exc:  # noqa: BLE001 - handed to the caller through the future
                log.warning("write failed: %s", exc)
                results.append((fut, None, exc))
        try:
            session.commit()
        except Exception as exc:  # noqa: BLE001
            session.rollback()
            results = [(fut, None, exc) for fut, _, _ in results]
        session.expunge_all()  # returned rows stay usable; the identity map does not grow
        for fut, result, exc in results:
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
