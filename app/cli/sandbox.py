"""`whale sandbox build`: the docker sandbox image."""

from typing import Annotated, Optional

import typer

from app.progress import err

cli = typer.Typer(help="The sandbox image.", no_args_is_help=True)


@cli.command("build")
def sandbox_build(
    base: Annotated[
        Optional[str],
        typer.Option(help="base image instead of a debootstrap rootfs, e.g. python:3.11-slim"),
    ] = None,
):
    """Build the docker sandbox image (cached: rebuilt only when its inputs change)."""
    from sandbox import image
    from sandbox.docker import engine_available

    why_not = engine_available()
    if why_not:
        err.print(f"[red]cannot build the sandbox image: {why_not}[/red]")
        raise typer.Exit(1)
    print(image.build(say=lambda m: err.print(f"[dim]{m}[/dim]"), base=base))
