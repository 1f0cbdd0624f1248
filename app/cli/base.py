"""What the command modules share: the workbench of a command, how a refusal ends one, and how
SIGTERM does."""

import asyncio
import os
import signal
import threading

import typer

from app.config import Settings
from app.interrupts import interrupt
from app.progress import err

BAD_INPUT = 2  # the exit code of a usage error, as typer gives for a bad option


def make_workbench(say=None, **overrides):
    """The Workbench of one command: settings from the environment, `overrides` on top."""
    from app.workbench import Workbench

    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    return Workbench(settings, say=say or (lambda m: err.print(f"[dim]{m}[/dim]")))


def fail(message: str) -> typer.Exit:
    """The exit of a command refused with a message (exit code 2)."""
    err.print(f"[red]{message}[/red]")
    return typer.Exit(BAD_INPUT)


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
