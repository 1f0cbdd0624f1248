from app.db.engine import open_engine, read_session
from app.db.writer import Writer

__all__ = ["open_engine", "read_session", "Writer"]
