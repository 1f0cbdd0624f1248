"""The `whale` command line: serve, demo, eval, train, search, run and its controls, compare, export.

A module per command group; each lists its commands in COMMANDS, registered here."""

import logging
import sys

import typer

from app.cli import loop, report, sandbox, serve, single

cli = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n\n")[0])
for group in (serve, single, loop, report):
    for command, name in group.COMMANDS:
        cli.command(name)(command)
cli.add_typer(sandbox.cli, name="sandbox")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cli()


if __name__ == "__main__":
    sys.exit(main())
