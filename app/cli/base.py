"""What the command modules share: how a refusal ends a command. (A command's workbench is
app/workbench.py's `make_workbench`; how SIGTERM ends one, app/interrupts.py.)"""

import typer

from app.progress import err

BAD_INPUT = 2  # the exit code of a usage error, as typer gives for a bad option


def fail(message: str) -> typer.Exit:
    """The exit of a command refused with a message (exit code 2)."""
    err.print(f"[red]{message}[/red]")
    return typer.Exit(BAD_INPUT)
