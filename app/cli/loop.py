"""`whale run EXPERIMENT.toml` (headless; `--rehearse`: the experiment's whole loop at CPU size, in
a store of its own, as app/loop/rehearse.py shrinks it) and the control commands: pause, resume,
stop, skip, force, promote. Control commands write to the store; the process running the loop (`whale
serve` or `whale run`) picks them up within a second.

The store's and the reads' modules are imported by the functions that use them, so that a command
that needs neither starts without them."""

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
import uvloop  # the event loop of every command: the gateway and evaluator run on it
from rich.console import Console
from rich.table import Table

from app.cli.base import fail
from app.cli.report import format_group, interval
from app.config import Settings
from app.experiment_schema import MAX_SEED, Experiment, distinct_seeds
from app.interrupts import TERMINATED, end_on_sigterm
from app.loop.experiment_file import ExperimentError, config_hash, load, parse
from app.loop.experiment_file import dry_run as describe_run
from app.progress import err, phase_progress, progress_bars

if TYPE_CHECKING:
    from app.workbench import Workbench


def run(
    experiment: Annotated[Path, typer.Argument(help="experiment TOML (see experiments/)")],
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON summary")] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="check everything that can be checked and print what would run"
        ),
    ] = False,
    seeds: Annotated[
        Optional[str],
        typer.Option(help="one run per seed, grouped, e.g. 0,1,2 (instead of the file's seeds)"),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="run a plan the machine check refuses (app/fit.py)"),
    ] = False,
    rehearse: Annotated[
        bool,
        typer.Option(
            "--rehearse",
            help="run the whole loop at CPU size on the demo model, in a store of its own, "
            "keeping every code path the file selects (docs/loop.md, Rehearsal)",
        ),
    ] = False,
    fork_from: Annotated[
        Optional[str],
        typer.Option(
            "--from",
            metavar="RUN:PHASE",
            help="fork: start from run RUN as it stood after its phase PHASE (its harness and "
            "checkpoint there; 0: its start); [budget] after_fork says whether the budgets go on "
            "from the parent's spending (docs/loop.md, Forks)",
        ),
    ] = None,
):
    """Run an experiment headless: progress per phase, a summary table at the end.

    An unfinished run of the same experiment (same name, same file) is resumed. With seeds
    (`--seeds` or the file's `seeds`), one run per seed, one after the other, then the group's
    mean and interval over seeds."""
    from app.loop.lock import StoreBusy, StoreLock

    try:
        point = _fork_point(fork_from)
        if point and (dry_run or rehearse):
            flag = "--dry-run" if dry_run else "--rehearse"
            raise ExperimentError(
                f"--from with {flag}: neither opens the store the fork point is in, so a fork "
                f"is not checked or rehearsed; run it without {flag}"
            )
        fork = point is not None  # a fork starts from its fork point's harness, not the file's
        exp, text = load(experiment, fork=fork)
        group_seeds = _seed_list(seeds) if seeds is not None else exp.seeds
        runs = [parse(text, str(experiment), seed=s, fork=fork) for s in group_seeds or []]
        runs = runs or [exp]
    except (ExperimentError, typer.BadParameter) as exc:
        raise fail(str(exc)) from None
    if rehearse:
        row = rehearse_file(experiment, exp, text, as_json)
        ok = row["result"].startswith("done") and row["check"] == "ok"
        raise typer.Exit(0 if ok else 1)
    settings = Settings(**exp.runtime.model_dump(exclude_none=True))
    if dry_run:  # no store, no model, no sandbox
        _print_plan(exp, settings, experiment, as_json)
        return
    refuse_unfit(machine_fit(exp, settings), force, quiet=as_json)
    try:
        lock = StoreLock(settings.home).acquire()
    except StoreBusy as exc:
        raise fail(str(exc)) from None
    group = {"name": exp.name, "seeds": group_seeds} if group_seeds else None

    async def main():
        from app.read.compare import group_summary
        from app.workbench import Workbench

        end_on_sigterm(asyncio.current_task(), f"`whale run {experiment}` resumes the run")
        workbench = Workbench(
            settings, say=(lambda m: None) if as_json else (lambda m: err.print(f"[dim]{m}[/dim]"))
        )
        try:
            results = [
                await _run_one(workbench, e, text, experiment, group, as_json, i == 0, point)
                for i, e in enumerate(runs)
            ]
            with workbench.session() as s:
                return results, group_summary(s, [r["run_id"] for r in results])
        finally:
            await workbench.stop()
            lock.release()

    try:
        results, aggregate = uvloop.run(main())
    except asyncio.CancelledError:  # SIGTERM: the run stays unfinished, to be resumed
        raise typer.Exit(TERMINATED) from None
    _print_results(results, group, aggregate, as_json)


def _fork_point(text: str | None):
    """`--from RUN:PHASE` parsed, or None without it (the fork module loads the store's)."""
    if text is None:
        return None
    from app.loop.fork import parse_point

    return parse_point(text)


def _print_plan(exp: Experiment, settings: Settings, path: Path, as_json: bool) -> None:
    """`--dry-run`: what would run, and whether the machine fits it."""
    try:
        plan = describe_run(exp, settings, str(path))
    except ExperimentError as exc:
        raise fail(str(exc)) from None
    fitted = machine_fit(exp, settings)
    plan["fit"] = fitted.as_dict()
    print(json.dumps(plan) if as_json else format_plan(plan) + "\n" + format_fit(fitted))


def _print_results(results: list[dict], group: dict | None, aggregate, as_json: bool) -> None:
    """Each run's summary, and a seed group's mean and interval over its seeds."""
    if group is None:
        (result,) = results
        if as_json:
            print(json.dumps(result))
        else:
            print_summary(result)
        return
    if as_json:
        print(json.dumps({"group": group, **aggregate, "runs": results}))
        return
    for result in results:
        print_summary(result)
    print(format_group(group, aggregate))


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(f"--seeds: comma-separated integers, not {text!r}") from None
    if not distinct_seeds(seeds):
        raise typer.BadParameter(f"--seeds: distinct integers from 0 to {MAX_SEED}, not {text!r}")
    return seeds


async def _run_one(
    workbench: "Workbench",
    exp: Experiment,
    text: str,
    path: Path,
    group: dict | None,
    as_json: bool,
    first: bool,
    point: tuple[int, int] | None = None,
):
    """Start (or resume) one run of the experiment and run it to its end; its summary.
    `point`: the (run, phase) it forks from (app/loop/fork.py)."""
    from app.loop.driver import Loop, start_experiment_run, unfinished_runs
    from app.loop.fork import fork_point
    from app.loop.manager import admit
    from app.read.forks import fork_of

    same = [r for r in unfinished_runs(workbench) if r.name == exp.name and fork_of(r) == point]
    changed = [r for r in same if r.config.get("hash") != config_hash(text)]
    if changed:
        raise fail(
            f"run {changed[0].id} ({exp.name!r}) is unfinished and was started "
            f"from a different {path.name}; stop it (whale stop "
            f"{changed[0].id}) or give the experiment another name"
        )
    if not same:  # checked before the model starts: a broken harness costs nothing
        try:  # the machine's fit was checked (and maybe forced) before the store was locked
            incoming = admit(workbench, exp, str(path), force=True)
            with workbench.session() as s:
                fork = fork_point(s, *point, exp.domain) if point else None
        except ExperimentError as exc:
            raise fail(str(exc)) from None
    if first:
        await workbench.start()
    row = (
        same[0]
        if same
        else await start_experiment_run(
            workbench, exp, text, config_hash(text), incoming, group, fork
        )
    )
    if same:
        err.print(f"resuming run {row.id}")
    with progress_bars() as progress:
        await Loop(workbench, row.id, phase_progress(progress, quiet=as_json)).run()
    with workbench.session() as s:
        return summary(s, row.id)


def machine_fit(exp, settings):
    """The plan against this machine: memory, GPUs and disk (app/fit.py)."""
    from app import fit

    return fit.check(exp, settings)


def format_fit(fitted) -> str:
    lines = [f"fit: {line}" for line in fitted.lines]
    lines += [f"refused: {why}" for why in fitted.refusals]
    if fitted.refusals:
        lines.append("whale run refuses this plan; --force runs it anyway")
    return "\n".join(lines)


def refuse_unfit(fitted, force: bool, quiet: bool = False) -> None:
    """Stop before anything starts when the plan cannot run here, unless forced."""
    if not quiet:
        err.print("\n".join(f"[dim]fit: {line}[/dim]" for line in fitted.lines))
    if not fitted.refusals:
        return
    reasons = "; ".join(fitted.refusals)
    if force:
        err.print(f"[yellow]--force: running a plan the machine check refuses: {reasons}[/yellow]")
        return
    raise fail(f"this plan cannot run here: {reasons} (--force runs it anyway)")


def format_plan(plan: dict) -> str:
    """The dry run's plan, one setting group per line."""
    sizes = ", ".join(f"{split} {n:,}" for split, n in plan["split_sizes"].items())
    lines = [
        f"{plan['name']}: {plan['strategy']} on {plan['domain']} ({sizes} tasks), "
        f"harness {plan['harness']}, scoring {plan['scoring']}",
        f"model: {plan['model']} ({plan['backend']} backend)",
    ]
    for group in ("switching", "rft", "search", "test", "budget", "sampling", "rollout", "work"):
        values = ", ".join(f"{k} {v}" for k, v in plan[group].items()) or "defaults"
        lines.append(f"{group}: {values}")
    lines.append(f"in flight: {plan['in_flight']}")
    lines += format_schedule(plan["schedule"])
    lines += [f"warning: {w}" for w in plan["warnings"]]
    lines.append("checked: the settings, the harness and the data; nothing was started")
    return "\n".join(lines)


def format_schedule(schedule: dict) -> list[str]:
    """The dry run's turn budget, epochs and effective batch (app/loop/schedule.py)."""
    turns, batch, epochs = schedule["turns"], schedule["batch"], schedule["epochs"]
    declared = turns["harness_max_turns"]
    window = turns["max_seq_len"]
    lines = [
        f"turns: the harness's MAX_TURNS {declared if declared else 'not declared'}, clamp "
        f"{turns['clamp']} ([rollout] max_calls): {turns['turns']} turns"
        + (f", RFT examples up to {window:,} tokens" if window else "")
    ]
    for where in ("split_found", "paper_size"):
        e = epochs.get(where)
        if e is None:
            continue
        phase = e["per_weight_phase"]
        phase = "-" if phase is None else " to ".join(dict.fromkeys(map(str, phase)))
        lines.append(
            f"epochs ({'the train split found' if where == 'split_found' else 'the paper'}: "
            f"{e['rows']:,} rows, {e['steps_per_epoch']} steps of {epochs['prompts_per_step']} "
            f"prompts an epoch): per weight phase {phase}, per run "
            + (str(e["per_run"]) if e["per_run"] is not None else "as the rollout budget allows")
        )
    lines.append(
        f"SFT batch: {batch['batch_size']} {batch['unit']}s "
        f"{'per data-parallel process' if batch['scope'] == 'rank' else 'in all'} x "
        f"{batch['training_processes']} training process(es) = "
        f"{batch['per_optimizer_step']} {batch['unit']}s per optimizer step"
    )
    return lines


def summary(s, run_id: int) -> dict:
    """The run's phases and test points, and its headline figures as `whale compare` has them."""
    from sqlmodel import select

    from app.db.schema import Event, Phase, Run, TrainingJob
    from app.read.compare import summarize
    from app.read.curves import intervals, test_points

    run = s.get(Run, run_id)
    phases = s.exec(select(Phase).where(Phase.run_id == run_id).order_by(Phase.id)).all()
    points = test_points(s, run_id)
    ci = intervals(s, points)  # the bootstrap once: summarize reuses them
    end = s.exec(
        select(Event)
        .where(Event.run_id == run_id, Event.kind == "run_end")
        .order_by(Event.id.desc())
    ).first()
    row = summarize(s, run, points, ci)
    return {
        "run_id": run.id,
        "name": run.name,
        "strategy": run.strategy,
        "status": run.status,
        "ended": end.detail["reason"] if end else None,
        "fork": {"run_id": run.parent_run_id, "phase": run.fork_phase}
        if run.parent_run_id
        else None,
        "selected": row["selected"],
        "selected_ci": row["selected_ci"],
        "selected_by": row["selected_by"],
        "best_test": row["best"],
        "best_test_ci": row["best_ci"],
        "best_at_rollouts": row["rollouts_to_best"],
        "rollouts": max((p.rollouts for p in points), default=0),
        "phases": [
            {
                "id": p.id,
                "kind": p.kind,
                "round": p.round,
                "status": p.status,
                "ended": p.ended_reason,
                "rollouts": p.rollouts,
                "harness_in": p.harness_in_id,
                "harness_out": p.harness_out_id,
                "checkpoint_in": p.checkpoint_in_id,
                "checkpoint_out": p.checkpoint_out_id,
            }
            for p in phases
        ],
        "test_points": [
            {
                "rollouts": p.rollouts,
                "weight_steps": p.weight_steps,
                "wall_s": p.wall_s,
                "mean_at_k": p.y,
                "ci": list(ci.get(p.evaluation_id, (None, None))),  # 95%, over the test tasks
                "evaluation_id": p.evaluation_id,
            }
            for p in points
        ],
        # per RFT step, where its time went (app/training/rft.py)
        "rft_steps": [
            {"job_id": j.id, "step": j.step, "status": j.status, **(j.timings or {})}
            for j in s.exec(
                select(TrainingJob).where(TrainingJob.run_id == run_id).order_by(TrainingJob.id)
            )
        ],
    }


def print_summary(result: dict) -> None:
    from app.read.training_jobs import TIMING_PARTS

    out = Console()
    table = Table(title=f"run {result['run_id']} · {result['name']} · {result['strategy']}")
    for column in (
        "phase",
        "round",
        "ended",
        "rollouts",
        "harness in -> out",
        "checkpoint in -> out",
    ):
        table.add_column(column)
    for p in result["phases"]:
        table.add_row(
            p["kind"],
            str(p["round"]),
            p["ended"] or p["status"],
            str(p["rollouts"]),
            f"{p['harness_in']} -> {p['harness_out']}",
            f"{p['checkpoint_in']} -> {p['checkpoint_out']}",
        )
    out.print(table)
    if result.get("rft_steps"):
        out.print("RFT steps: seconds per part")
        steps = Table(box=None, pad_edge=False)  # eight columns fit 80 without borders
        for column in ("step", "status", *TIMING_PARTS.values()):
            steps.add_column(column, no_wrap=True)
        for j in result["rft_steps"]:
            seconds = [f"{j[k]:.1f}" if k in j else "-" for k in TIMING_PARTS]
            steps.add_row(str(j["step"]), j["status"], *seconds)
        out.print(steps)
    curve = ", ".join(f"{p['mean_at_k']:.3f}@{p['rollouts']}" for p in result["test_points"])
    out.print(f"test mean@k by rollouts used: {curve or 'none'}")
    if result["selected"] is not None:
        out.print(
            f"selected test mean@k {result['selected']:.3f} {interval(result['selected_ci'])} "
            f"({result['selected_by']}); the maximum over test points "
            f"{result['best_test']:.3f} {interval(result['best_test_ci'])} after "
            f"{result['best_at_rollouts']} rollouts; 95% intervals over the test tasks"
        )
    out.print(f"run {result['status']} ({result['ended']})")


def rehearse_file(path: Path, exp, text: str, as_json: bool = False) -> dict:
    """Rehearse the experiment of `path`; its result: file, phases, wall time, the run's end
    and `whale check`'s verdict. Prints what shrinks first."""
    from app.loop.rehearse import findings, rehearsal_home, shrink, stand_in_agent, verdict
    from app.workbench import Workbench

    small, changed = shrink(exp)
    home = rehearsal_home()
    settings = Settings(home=home, **small.runtime.model_dump(exclude_none=True))
    changed += stand_in_agent(home / "agent-bin", small)
    if not as_json:
        print(f"rehearsing {path} in {home}; what shrinks:")
        print("\n".join(f"  {line}" for line in changed))
    say = (lambda m: None) if as_json else (lambda m: err.print(f"[dim]{m}[/dim]"))

    async def main():
        workbench = Workbench(settings, say=say)
        try:
            await workbench.start()
            if workbench.vllm and settings.vllm_urls:  # a shared server: from the base weights
                await workbench.vllm.restore_base()
            result = await _run_one(workbench, small, text, path, None, True, False)
            with workbench.session() as s:
                result["check"] = verdict(s, result["run_id"])
                result["findings"] = findings(s, result["run_id"])
            return result
        finally:
            await workbench.stop()

    start = time.monotonic()
    try:
        result = uvloop.run(main())
        outcome = f"{result['status']} ({result['ended']})"
        if result["findings"]:
            outcome = "failed: " + "; ".join(result["findings"])
    except Exception as exc:  # the rehearsal's finding: what failed, as the table shows it
        result, outcome = {"phases": [], "check": "not run"}, f"failed: {exc!r}"[:500]
    row = {
        "file": str(path),
        "phases": " ".join(p["kind"][0].upper() for p in result["phases"]),
        "wall_s": round(time.monotonic() - start, 1),
        "result": outcome,
        "check": result["check"],
        "home": str(home),
        "shrunk": changed,
    }
    if as_json:
        print(json.dumps(row))
    else:
        if "run_id" in result:
            print_summary(result)
        print(
            f"rehearsal of {path}: {outcome}; phases {row['phases'] or 'none'}; "
            f"whale check: {row['check']}; {row['wall_s']} s; store kept in {home}"
        )
    return row


def _control(run_id: int, action: str, reason: str, **args) -> None:
    from app import control
    from app.db import Writer, open_engine

    settings = Settings()
    if not settings.db_path.exists():
        raise fail(f"no store at {settings.db_path} (set WHALE_HOME)")
    engine = open_engine(settings.db_path)
    writer = Writer(engine)
    try:
        asyncio.run(control.apply(writer, run_id, action, reason, "cli", **args))
    except control.NoSuchRun:
        raise fail(f"no run {run_id} in {settings.db_path}") from None
    except control.Refused as exc:
        raise fail(f"{action} refused: {exc}") from None
    finally:
        writer.close()
        engine.dispose()
    print(f"run {run_id}: {action} requested")


RunId = Annotated[int, typer.Argument(help="run id")]
Reason = Annotated[str, typer.Option(help="why, for the run's log")]


def pause(run_id: RunId, reason: Reason = ""):
    """Finish the rollouts in flight and the current training step; start nothing new."""
    _control(run_id, "pause", reason)


def resume(run_id: RunId, reason: Reason = ""):
    """Go on after a pause."""
    _control(run_id, "resume", reason)


def stop(run_id: RunId, reason: Reason = ""):
    """End the run once the rollouts in flight finish."""
    _control(run_id, "stop", reason)


def skip(run_id: RunId, reason: Reason = ""):
    """End the current phase after its current step or iteration; the next one starts."""
    _control(run_id, "skip", reason)


def force(
    run_id: RunId, kind: Annotated[str, typer.Option(help="weight | harness")], reason: Reason = ""
):
    """End the current phase and make the next one of this kind."""
    _control(run_id, "force", reason, kind=kind)


def promote(
    run_id: RunId,
    harness: Annotated[Optional[int], typer.Option(help="harness id")] = None,
    checkpoint: Annotated[Optional[int], typer.Option(help="checkpoint id")] = None,
    reason: Reason = "",
):
    """Make the next phase start from this harness or checkpoint."""
    args = {"harness_id": harness} if harness is not None else {}
    if checkpoint is not None:
        args["checkpoint_id"] = checkpoint
    _control(run_id, "promote", reason, **args)


COMMANDS = [
    (run, "run"),
    (pause, "pause"),
    (resume, "resume"),
    (stop, "stop"),
    (skip, "skip"),
    (force, "force"),
    (promote, "promote"),
]
