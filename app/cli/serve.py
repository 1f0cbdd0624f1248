"""`whale serve` and `whale demo`: the UI and API over a store, and the first-contact demo."""

import asyncio
from typing import Annotated, Optional

import typer
import uvicorn
import uvloop  # the event loop of every command: the gateway and evaluator run on it

from app.cli.base import make_workbench
from app.cli.single import evaluate, summary_line
from app.config import Settings
from app.domains import get_domain
from app.progress import err


def _web_server(workbench, host: str, port: int) -> uvicorn.Server:
    """Off loopback the server requires an access token: $WHALE_TOKEN, else a fresh one."""
    from app.server import create_app
    from app.web.security import access_token

    app = create_app(workbench, token=access_token(host, Settings().token), host=host)
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))


def _link(server: uvicorn.Server, path: str = "/") -> str:
    """A URL to open in a browser; it carries the access token when the server needs one."""
    host, token = server.config.host, server.config.app.state.token
    host = f"[{host}]" if ":" in host else host  # IPv6
    return f"http://{host}:{server.config.port}{path}" + (f"?token={token}" if token else "")


async def _start_web(server: uvicorn.Server) -> asyncio.Task:
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():  # e.g. the port is taken: uvicorn exits instead of raising
            raise typer.Exit(f"could not start the web server on port {server.config.port}")
        await asyncio.sleep(0.05)
    return task


def serve(
    host: Annotated[
        Optional[str], typer.Option(help="default 127.0.0.1; any other address requires a token")
    ] = None,
    port: Annotated[Optional[int], typer.Option(help="default 8000")] = None,
):
    """Serve the UI and API over the store in $WHALE_HOME; resume its unfinished runs."""
    from app.loop.lock import StoreBusy, StoreLock

    settings = Settings()
    try:
        lock = StoreLock(settings.home).acquire()
    except StoreBusy as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None

    async def main():
        workbench = make_workbench()
        server = _web_server(workbench, host or settings.host, port or settings.port)
        loops = server.config.app.state.loops
        err.print(f"serving {settings.db_path} at {_link(server)}", soft_wrap=True)
        try:
            web = await _start_web(server)
            resumed = await loops.resume_all()
            if resumed:
                err.print(f"resumed runs {', '.join(map(str, resumed))}")
            await web
        finally:
            await loops.stop()
            await workbench.stop()
            lock.release()

    uvloop.run(main())


def demo(
    quick: Annotated[bool, typer.Option(help="16 tasks x k=2, then exit")] = False,
    host: Annotated[
        Optional[str], typer.Option(help="default 127.0.0.1; any other address requires a token")
    ] = None,
    port: Annotated[Optional[int], typer.Option(help="default 8000")] = None,
):
    """Evaluate the arith seed harness with the embedded model while the UI shows it."""
    settings = Settings()
    limit, k = (16, 2) if quick else (None, 4)
    domain = get_domain("arith")

    async def main():
        workbench = make_workbench()
        server = _web_server(workbench, host or settings.host, port or settings.port)
        web = None
        try:
            await workbench.start()
            web = await _start_web(server)
            err.print(f"UI: {_link(server)}", soft_wrap=True)
            run, evaluation, statuses, reasons = await evaluate(
                workbench,
                domain.seed_harness,
                "arith",
                "test",
                k,
                limit,
                quiet=False,
                on_start=lambda r: err.print(
                    f"run {r.id}: {_link(server, f'/runs/{r.id}')}", soft_wrap=True
                ),
            )
            print(summary_line(evaluation, statuses, reasons))
            if not quick:
                err.print(
                    f"results at {_link(server, f'/runs/{run.id}')} - Ctrl-C to stop",
                    soft_wrap=True,
                )
                await web
        finally:
            server.should_exit = True
            if web:
                await web
            await workbench.stop()

    uvloop.run(main())


COMMANDS = [(serve, "serve"), (demo, "demo")]
