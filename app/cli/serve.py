"""`whale serve` and `whale demo`: the UI and API over a store, and the first-contact demo."""

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Annotated, Optional

import typer
import uvicorn
import uvloop  # the event loop of every command: the gateway and evaluator run on it

from app.cli.phases import evaluate, summary_line
from app.config import Settings
from app.domains import get_domain
from app.interrupts import GRACE_S, TERMINATED
from app.progress import err


def _token(host: str, no_token: bool) -> str | None:
    """The access token the server will require: $WHALE_TOKEN, else a fresh one; None with
    --no-token, which a server off loopback is refused (app/web/security.py)."""
    from app.web.security import access_token

    try:
        return access_token(host, Settings().token, open_access=no_token)
    except ValueError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None


def _web_server(workbench, host: str, port: int, token: str | None) -> uvicorn.Server:
    from app.server import create_app

    app = create_app(workbench, token=token, host=host)
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))


def _link(server: uvicorn.Server, path: str = "/") -> str:
    """A URL to open in a browser; it carries the access token when the server needs one."""
    host, token = server.config.host, server.config.app.state.token
    host = f"[{host}]" if ":" in host else host  # IPv6
    return f"http://{host}:{server.config.port}{path}" + (f"?token={token}" if token else "")


def _after_the_web(first: Callable[[], None], then: Callable[[], None]) -> None:
    """SIGTERM and SIGINT end the web server (uvicorn's own handlers, in place while it
    serves), which then raises the signal again for its default action, killing the process
    before its `finally` stops the runs. Installed before the web starts, these take that
    repeat instead: `first` on it, `then` on any further signal (stop waiting)."""
    seen = []

    def handler(signum, frame):
        (then if seen else first)()
        seen.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


async def _start_web(server: uvicorn.Server) -> asyncio.Task:
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():  # e.g. the port is taken: uvicorn exits instead of raising
            raise typer.Exit(f"could not start the web server on port {server.config.port}")
        await asyncio.sleep(0.05)
    return task


# the options of both commands' web server
Host = Annotated[Optional[str], typer.Option(help="default 127.0.0.1")]
Port = Annotated[Optional[int], typer.Option(help="default 8000")]
NoToken = Annotated[
    bool,
    typer.Option(
        "--no-token",
        help="serve a loopback server without the access token (any local process may then use it)",
    ),
]


def serve(
    host: Host = None,
    port: Port = None,
    no_token: NoToken = False,
):
    """Serve the UI and API over the store in $WHALE_HOME; its runs, unfinished and new, are
    driven by a loop process beside it (app/loop/manager.py)."""
    from app.loop.lock import StoreBusy, StoreLock
    from app.loop.manager import LoopProcess
    from app.workbench import make_workbench

    settings = Settings()
    host = host or settings.host
    token = _token(host, no_token)
    try:
        lock = StoreLock(settings.home).acquire()
    except StoreBusy as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None

    async def main():
        workbench = make_workbench()  # reads, and writes control requests: never started here
        server = _web_server(workbench, host, port or settings.port, token)
        loops = LoopProcess(
            lock, say=lambda m: err.print(f"[yellow]{m}[/yellow]"), nice=settings.loop_nice
        )
        _after_the_web(first=lambda: None, then=loops.kill)  # the web's end stops the loops
        err.print(f"serving {settings.db_path} at {_link(server)}", soft_wrap=True)
        try:
            web = await _start_web(server)
            loops.start()
            await web
        finally:
            await loops.stop(GRACE_S + 5)
            await workbench.stop()
            lock.release()

    uvloop.run(main())


def demo(
    quick: Annotated[bool, typer.Option(help="16 tasks x k=2, then exit")] = False,
    host: Host = None,
    port: Port = None,
    no_token: NoToken = False,
):
    """Evaluate the arith seed harness with the embedded model while the UI shows it."""
    from app.loop.lock import StoreBusy, StoreLock
    from app.loop.manager import LoopWorker
    from app.workbench import make_workbench

    settings = Settings()
    host = host or settings.host
    token = _token(host, no_token)
    limit, k = (16, 2) if quick else (None, 4)
    domain = get_domain("arith")
    try:  # its UI can start runs: it drives the store, as a server does
        lock = StoreLock(settings.home).acquire()
    except StoreBusy as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None

    async def main():
        workbench = make_workbench()
        server = _web_server(workbench, host, port or settings.port, token)
        web = loops = None
        try:
            await workbench.start()
            main_task, loop = asyncio.current_task(), asyncio.get_running_loop()
            _after_the_web(  # the web's end ends the demo, mid-evaluation too
                first=lambda: loop.call_soon_threadsafe(main_task.cancel),
                then=lambda: os._exit(TERMINATED),
            )
            web = await _start_web(server)
            # runs started from the UI are driven here (by `whale serve`, in a process apart)
            loops = asyncio.create_task(LoopWorker(workbench).serve())
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
            if loops:
                loops.cancel("the server shut down")
                await asyncio.gather(loops, return_exceptions=True)
            if web:
                await web
            await workbench.stop()
            lock.release()

    try:
        uvloop.run(main())
    except asyncio.CancelledError:  # Ctrl-C or SIGTERM
        raise typer.Exit(TERMINATED) from None


COMMANDS = [(serve, "serve"), (demo, "demo")]
