"""One loop-driving process per store: `whale serve` and `whale run` hold an exclusive lock on
$WHALE_HOME/whale.lock, so a second one is refused instead of running the same phases twice."""

import fcntl
import os
from pathlib import Path


class StoreBusy(RuntimeError):
    pass


class StoreLock:
    def __init__(self, home: Path):
        self.path = home / "whale.lock"
        self._file = None

    def acquire(self) -> "StoreLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise StoreBusy(
                f"{holder} is already running the loop on {self.path.parent}; "
                "stop it first (one server per store)"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"whale (pid {os.getpid()})")
        f.flush()
        self._file = f
        return self

    def fileno(self) -> int:
        """The locked file's descriptor: a child process given it holds the lock with us."""
        return self._file.fileno()

    def release(self) -> None:
        if self._file:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
