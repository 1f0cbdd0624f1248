"""Why a task that drives runs was cancelled: SIGTERM, a server shutting down.

The CancelledError's own message does not always reach the run's handler (asyncio drops it on
some ways up through nested awaits, seen under load), so whoever cancels records the reason
here too, by task, and the run's log (run_interrupted) reads it from here first."""

import asyncio
import weakref

_WHY: "weakref.WeakKeyDictionary[asyncio.Task, str]" = weakref.WeakKeyDictionary()


def interrupt(task: asyncio.Task, why: str) -> None:
    """Cancel the task that drives a run (or awaits one), saying why."""
    _WHY[task] = why
    task.cancel(why)


def why_interrupted(exc: asyncio.CancelledError) -> str:
    """In the cancelled task: the reason its canceller gave."""
    recorded = _WHY.get(asyncio.current_task())
    return recorded or (exc.args[0] if exc.args else "the process driving the run stopped")
