"""The `whale` command line: serve, demo, eval, train, search, run and its controls, compare, export."""

import asyncio
import json
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
import uvicorn
import uvloop  # the event loop of every command: the gateway and evaluator run on it

from app.config import Settings
from app.domains import get_domain
from app.loop.commands import COMMANDS
from app.progress import err, phase_progress, progress_bars
from app.report.cli import compare, export

cli = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


def _workbench(say=None, **overrides):
    from app.workbench import Workbench

    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    return Workbench(settings, say=say or (lambda m: err.print(f"[dim]{m}[/dim]")))


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


async def _evaluate(
    workbench,
    harness: Path,
    domain: str,
    split: str,
    k: int,
    limit: Optional[int],
    quiet: bool,
    on_start=None,
):
    """Run one evaluation with a progress bar; returns (run, evaluation, status counts)."""
    statuses: Counter = Counter()
    reasons: Counter = Counter()
    with progress_bars() as progress:
        bar = progress.add_task(
            f"{harness.name} on {domain}/{split}", total=None, passed=0, visible=not quiet
        )

        def started(run, total):
            progress.update(bar, total=total)
            if on_start:
                on_start(run)

        def done(rollout):
            statuses[rollout.status] += 1
            if rollout.reason:
                reasons[rollout.reason] += 1
            progress.update(bar, advance=1, passed=statuses["pass"])

        run, evaluation = await workbench.evaluate_file(
            harness, domain, split, k, limit, on_start=started, progress=done
        )
    return run, evaluation, statuses, reasons


def _summary(evaluation, statuses: Counter, reasons: Counter) -> str:
    failures = ", ".join(f"{r}: {n}" for r, n in reasons.most_common()) or "none"
    return (
        f"mean@{evaluation.k} = {evaluation.mean_at_k:.3f} on {evaluation.split} "
        f"({evaluation.n_tasks} tasks x k={evaluation.k}; "
        + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()))
        + f"; failures by reason: {failures})"
    )


@cli.command()
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
        workbench = _workbench()
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


@cli.command()
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
        workbench = _workbench()
        server = _web_server(workbench, host or settings.host, port or settings.port)
        web = None
        try:
            await workbench.start()
            web = await _start_web(server)
            err.print(f"UI: {_link(server)}", soft_wrap=True)
            run, evaluation, statuses, reasons = await _evaluate(
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
            print(_summary(evaluation, statuses, reasons))
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


@cli.command("eval")
def eval_(
    harness: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="harness .py file")],
    domain: Annotated[str, typer.Option(help="task domain")] = "arith",
    split: Annotated[str, typer.Option(help="train | harness | test")] = "test",
    k: Annotated[int, typer.Option("-k", min=1, help="samples per task")] = 2,
    limit: Annotated[Optional[int], typer.Option(min=1, help="first N tasks only")] = None,
    sandbox: Annotated[Optional[str], typer.Option(help="process | docker (default: auto)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
):
    """Evaluate any harness file: progress bar, then mean@k and failures by reason."""
    try:
        get_domain(domain).tasks(split)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if sandbox not in (None, "process", "docker"):
        raise typer.BadParameter(f"sandbox {sandbox!r} is not a backend; use process or docker")

    async def main():
        workbench = _workbench(say=(lambda m: None) if as_json else None, sandbox=sandbox)
        try:
            await workbench.start()
            run, evaluation, statuses, reasons = await _evaluate(
                workbench, harness, domain, split, k, limit, quiet=as_json
            )
        finally:
            await workbench.stop()
        if as_json:
            print(
                json.dumps(
                    {
                        "run_id": run.id,
                        "evaluation_id": evaluation.id,
                        "mean_at_k": evaluation.mean_at_k,
                        "k": k,
                        "split": split,
                        "n_tasks": evaluation.n_tasks,
                        "n_rollouts": sum(statuses.values()),
                        "statuses": dict(statuses),
                        "reasons": dict(reasons),
                        "mean_turns": evaluation.mean_turns,
                        "total_tokens": evaluation.total_tokens,
                    }
                )
            )
        else:
            print(_summary(evaluation, statuses, reasons))
            print(f"run {run.id} stored in {Settings().db_path}")

    uvloop.run(main())


@cli.command()
def train(
    harness: Annotated[
        Optional[Path],
        typer.Argument(
            exists=True, dir_okay=False, help="harness file (default: the domain's seed)"
        ),
    ] = None,
    domain: Annotated[str, typer.Option(help="task domain")] = "arith",
    steps: Annotated[int, typer.Option(min=1, help="RFT steps")] = 2,
    prompts: Annotated[int, typer.Option(min=1, help="train prompts per step")] = 32,
    n: Annotated[int, typer.Option("-n", min=1, help="rollouts per prompt")] = 8,
    lr: Annotated[float, typer.Option(help="learning rate")] = 2e-4,
    lora_rank: Annotated[int, typer.Option(min=1, help="LoRA rank")] = 16,
    full: Annotated[bool, typer.Option("--full", help="full fine-tune instead of LoRA")] = False,
    test_k: Annotated[int, typer.Option(min=1, help="samples per test task")] = 4,
    test_limit: Annotated[Optional[int], typer.Option(min=1, help="first N test tasks")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
):
    """A weight phase: test mean@k, online RFT steps under the harness, test mean@k again."""
    from app.config import RFTConfig
    from app.training.phase import weight_phase
    from app.workbench import read_harness

    try:
        the_domain = get_domain(domain)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    harness = harness or the_domain.seed_harness
    cfg = RFTConfig(
        steps=steps,
        prompts_per_step=prompts,
        samples_per_prompt=n,
        lr=lr,
        lora_rank=lora_rank,
        lora=not full,
    )

    async def main():
        workbench = _workbench(say=(lambda m: None) if as_json else None)
        try:
            await workbench.start()
            config = {
                "harness": str(harness),
                "rft": cfg.model_dump(),
                "test_k": test_k,
                "test_limit": test_limit,
            }
            run, first, base = await workbench.start_run(
                f"rft {harness.name}", "rft", domain, read_harness(harness), config
            )
            with progress_bars() as progress:
                on = phase_progress(progress, quiet=as_json)
                try:
                    result = await weight_phase(
                        workbench, run.id, first, base, the_domain, cfg, test_k, test_limit, on
                    )
                except BaseException:
                    await workbench.finish_run(run.id, "failed")
                    raise
            await workbench.finish_run(run.id, "done")
        finally:
            await workbench.stop()
        summary = {
            "run_id": run.id,
            "before": result.before.mean_at_k,
            "after": result.after.mean_at_k,
            "k": test_k,
            "n_test_tasks": result.after.n_tasks,
            "rollouts_used": result.rollouts_used,
            "checkpoint_id": result.checkpoint.id,
            "steps": [
                {
                    "accepted": j.n_accepted,
                    "rollouts": j.n_rollouts,
                    "loss": j.loss,
                    "status": j.status,
                }
                for j in result.jobs
            ],
        }
        if as_json:
            print(json.dumps(summary))
        else:
            print(
                f"test mean@{test_k}: {summary['before']:.3f} -> {summary['after']:.3f} "
                f"after {steps} RFT steps ({summary['rollouts_used']} training rollouts); "
                f"run {run.id}, checkpoint {result.checkpoint.id}"
            )

    uvloop.run(main())


@cli.command()
def search(
    harness: Annotated[
        Optional[Path],
        typer.Argument(
            exists=True, dir_okay=False, help="harness file (default: the domain's seed)"
        ),
    ] = None,
    domain: Annotated[str, typer.Option(help="task domain")] = "arith",
    proposer: Annotated[str, typer.Option(help="knobs | llm | agent")] = "knobs",
    iterations: Annotated[int, typer.Option(min=0, help="proposing iterations")] = 3,
    candidates: Annotated[int, typer.Option(min=1, help="K candidates per iteration")] = 3,
    tasks: Annotated[Optional[int], typer.Option(min=1, help="first N harness-split tasks")] = None,
    samples: Annotated[int, typer.Option(min=1, help="rollouts per task")] = 1,
    llm_url: Annotated[
        Optional[str], typer.Option(help="llm proposer: OpenAI-compatible URL")
    ] = None,
    llm_model: Annotated[Optional[str], typer.Option(help="llm proposer: model name")] = None,
    agent_command: Annotated[
        Optional[str],
        typer.Option(help="agent proposer: command line; {workspace} {k} {iteration} substituted"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
):
    """A harness phase: propose, validate, evaluate and select harnesses on the harness split."""
    import shlex

    from pydantic import ValidationError

    from app.config import SearchConfig, describe
    from app.search.phase import search_file

    try:
        the_domain = get_domain(domain)
        cfg = SearchConfig(
            proposer=proposer,
            iterations=iterations,
            candidates=candidates,
            tasks=tasks,
            samples=samples,
            llm={"url": llm_url, "model": llm_model},
            agent={"command": shlex.split(agent_command or "")},
        )
    except ValidationError as exc:
        raise typer.BadParameter(describe(exc)) from None
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    harness = harness or the_domain.seed_harness

    async def main():
        workbench = _workbench(say=(lambda m: None) if as_json else None)
        try:
            await workbench.start()
            with progress_bars() as progress:
                phase = await search_file(
                    workbench, harness, domain, cfg, phase_progress(progress, quiet=as_json)
                )
            with workbench.session() as s:
                summary = _search_summary(s, phase)
        finally:
            await workbench.stop()
        if as_json:
            print(json.dumps(summary))
        else:
            first = summary["iterations"][0]
            print(
                f"harness-split success {first['best_success']:.3f} -> "
                f"{summary['accepted_success']:.3f}: accepted harness #{phase.harness_out_id} "
                f"after {len(summary['iterations']) - 1} iterations "
                f"({summary['rollouts']} rollouts, ended: {phase.ended_reason}); run {phase.run_id}"
            )

    uvloop.run(main())


def _search_summary(s, phase) -> dict:
    from sqlmodel import select

    from app.db.schema import Harness, SearchIteration

    iterations = s.exec(
        select(SearchIteration)
        .where(SearchIteration.phase_id == phase.id)
        .order_by(SearchIteration.iteration)
    ).all()
    harnesses = s.exec(select(Harness).where(Harness.run_id == phase.run_id)).all()
    # The accepted harness has the best success rate, so it is always on the frontier.
    accepted = next(
        p["success"] for p in iterations[-1].frontier if p["harness_id"] == phase.harness_out_id
    )
    return {
        "run_id": phase.run_id,
        "phase_id": phase.id,
        "ended": phase.ended_reason,
        "rollouts": phase.rollouts,
        "incoming_harness_id": phase.harness_in_id,
        "accepted_harness_id": phase.harness_out_id,
        "accepted_success": accepted,
        "iterations": [
            {
                "iteration": i.iteration,
                "status": i.status,
                "error": i.error,
                "n_candidates": i.n_candidates,
                "n_valid": i.n_valid,
                "best_success": i.best_success,
                "accepted_harness_id": i.accepted_harness_id,
                "prompt_tokens": i.prompt_tokens,
                "completion_tokens": i.completion_tokens,
                "cost_usd": i.cost_usd,
                "proposer_wall_s": i.proposer_wall_s,
            }
            for i in iterations
        ],
        "harnesses": [
            {
                "id": h.id,
                "name": h.name,
                "valid": h.valid,
                "error": h.error,
                "parent_ids": h.parent_ids,
                "iteration": h.iteration,
                "proposer": h.proposer,
            }
            for h in harnesses
        ],
    }


for command, name in COMMANDS:
    cli.command(name)(command)
cli.command()(compare)
cli.command()(export)

sandbox_cli = typer.Typer(help="The sandbox image.", no_args_is_help=True)
cli.add_typer(sandbox_cli, name="sandbox")


@sandbox_cli.command("build")
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


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cli()


if __name__ == "__main__":
    sys.exit(main())
