"""What the command modules share: the workbench of a command, and how a refusal ends one."""

import typer

from app.config import Settings
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
