"""The `whale` command line: serve, demo, eval, train, search, run and its controls, compare, export,
import.

A module per command group; each lists its commands in COMMANDS, registered here."""

import logging
import sys

import typer

from app.cli import loop, phases, report, sandbox, serve

cli = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n\n")[0])
for group in (serve, phases, loop, report):
    for command, name in group.COMMANDS:
        cli.command(name)(command)
cli.add_typer(sandbox.cli, name="sandbox")


def main() -> None:
    from app.cli.base import BAD_INPUT
    from app.progress import err
    from sandbox.pool import SandboxUnavailable

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        cli()
    except SandboxUnavailable as exc:  # a refusal to run harnesses here, said in one line
        err.print(f"[red]{exc}[/red]", soft_wrap=True)
        sys.exit(BAD_INPUT)


if __name__ == "__main__":
    sys.exit(main())
