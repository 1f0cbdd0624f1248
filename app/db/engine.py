"""SQLite engine in WAL mode: one writer thread (see writer.py), any number of readers."""

import sqlite3
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

from app.db.migrations import migrate


def _pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at checkpoints, fast commits
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def open_engine(path: Path) -> Engine:
    """Create (or upgrade) the database at `path` and return an engine for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")  # persistent: recorded in the file itself
        migrate(conn)
    conn.close()
    engine = create_engine(
        f"sqlite:///{path}", connect_args={"check_same_thread": False, "timeout": 10}
    )
    event.listen(engine, "connect", _pragmas)
    return engine


def writing_engine(engine: Engine) -> Engine:
    """An engine on the same file whose transactions begin IMMEDIATE: the writer's. A deferred
    transaction that read, then writes, fails at once (SQLITE_BUSY, no waiting) if another
    process committed meanwhile: the loop process and the web's control requests, or `whale
    pause` from a shell, write the same store. IMMEDIATE takes the write lock first, waiting
    up to busy_timeout for it (SQLAlchemy's recipe for pysqlite, which SAVEPOINTs need too)."""
    writing = create_engine(engine.url, connect_args={"check_same_thread": False, "timeout": 10})

    @event.listens_for(writing, "connect")
    def connect(dbapi_conn, record):
        _pragmas(dbapi_conn, record)
        dbapi_conn.isolation_level = None  # pysqlite begins nothing itself; "begin" below does

    @event.listens_for(writing, "begin")
    def begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return writing


def read_session(engine: Engine) -> Session:
    return Session(engine, expire_on_commit=False)
