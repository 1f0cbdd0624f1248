"""Why a task that drives runs was cancelled (SIGTERM, a server shutting down), and how SIGTERM
ends a process that drives runs: as Ctrl-C does, within GRACE_S.

The CancelledError's own message does not always reach the run's handler (asyncio drops it on
some ways up through nested awaits, seen under load), so whoever cancels records the reason
here too, by task, and the run's log (run_interrupted) reads it from here first."""

import asyncio
import os
import signal
import threading
import weakref

from app.progress import err

_WHY: "weakref.WeakKeyDictionary[asyncio.Task, str]" = weakref.WeakKeyDictionary()


def interrupt(task: asyncio.Task, why: str) -> None:
    """Cancel the task that drives a run (or awaits one), saying why."""
    _WHY[task] = why
    task.cancel(why)


def why_interrupted(exc: asyncio.CancelledError) -> str:
    """In the cancelled task: the reason its canceller gave."""
    recorded = _WHY.get(asyncio.current_task())
    return recorded or (exc.args[0] if exc.args else "the process driving the run stopped")


TERMINATED = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended
GRACE_S = 30.0  # after SIGTERM, the most a command takes to wind down before it exits anyway


def end_on_sigterm(task: asyncio.Task, what: str, why: str = "SIGTERM") -> None:
    """SIGTERM (what systemd and `docker stop` send) ends the command the way Ctrl-C does: the
    task is cancelled, so rollouts in flight stop, their rows stay pending and are run again
    when the run resumes, and the model server and sandboxes are shut down. Should that take
    more than GRACE_S, the process exits anyway: the store is crash-safe (docs/faults.md)."""

    def on_term():
        err.print(f"[yellow]SIGTERM: stopping; {what}[/yellow]")
        interrupt(task, why)  # the runs' logs say so (run_interrupted)
        timer = threading.Timer(GRACE_S, lambda: os._exit(TERMINATED))
        timer.daemon = True
        timer.start()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_term)
