"""`whale eval`, `whale train`, `whale search`: one evaluation, one weight phase or one harness
phase of a harness file, each as a run of its own.

The reads' and the proposers' modules are imported by the commands that use them, so that a
command that needs neither starts without them."""

import json
import tomllib
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
import uvloop  # the event loop of every command: the gateway and evaluator run on it
from pydantic import ValidationError

from app.cli.base import fail
from app.config import Settings
from app.domains import get_domain, scoring_of
from app.experiment_schema import RolloutLimits, Sampling, describe
from app.llm.generation import refused_fields
from app.progress import phase_progress, progress_bars


async def evaluate(
    workbench,
    harness: Path,
    domain: str,
    split: str,
    k: int,
    limit: Optional[int],
    quiet: bool,
    on_start=None,
    declared: dict | None = None,
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
            harness, domain, split, k, limit, on_start=started, progress=done, declared=declared
        )
    return run, evaluation, statuses, reasons


def stored_benchmarks(evaluation_id: int) -> dict | None:
    """The evaluation's per-benchmark figures (app/read/benchmarks.py), read from the store."""
    from app.db import open_engine, read_session
    from app.read.benchmarks import evaluation_benchmarks

    with read_session(open_engine(Settings().db_path)) as s:
        return evaluation_benchmarks(s, evaluation_id)


def summary_line(evaluation, statuses: Counter, reasons: Counter) -> str:
    failures = ", ".join(f"{r}: {n}" for r, n in reasons.most_common()) or "none"
    infra = f", {evaluation.n_infra} infrastructure failures left out" if evaluation.n_infra else ""
    ci = (
        f" [{evaluation.ci_low:.3f}, {evaluation.ci_high:.3f}] (95%, over the tasks)"
        if evaluation.ci_low is not None
        else ""
    )
    return (
        f"mean@{evaluation.k} = {evaluation.mean_at_k:.3f}{ci} on {evaluation.split}{infra} "
        f"({evaluation.n_tasks} tasks x k={evaluation.k}, {evaluation.scoring} scoring; "
        + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()))
        + f"; failures by reason: {failures})"
    )


def settings_table(pairs: list[str], model: type, option: str) -> dict:
    """`--sampling top_k=20 --sampling chat_template_kwargs={enable_thinking=true}`: the
    table as an experiment's [sampling] would give it (values are TOML), checked."""
    try:
        table = tomllib.loads("\n".join(pairs))
        return model.model_validate(table).model_dump(exclude_defaults=True)
    except tomllib.TOMLDecodeError as exc:
        raise typer.BadParameter(f"{option}: give KEY=VALUE, the value in TOML ({exc})") from None
    except ValidationError as exc:
        raise typer.BadParameter(f"{option}: {describe(exc)}") from None


def eval_(
    harness: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="harness .py file")],
    domain: Annotated[str, typer.Option(help="task domain")] = "arith",
    split: Annotated[str, typer.Option(help="train | harness | test")] = "test",
    k: Annotated[int, typer.Option("-k", min=1, help="samples per task")] = 2,
    limit: Annotated[Optional[int], typer.Option(min=1, help="first N tasks only")] = None,
    sandbox: Annotated[Optional[str], typer.Option(help="process | docker (default: auto)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    sampling: Annotated[
        list[str],
        typer.Option(help="a sampling default, KEY=VALUE in TOML, e.g. top_k=20 (repeatable)"),
    ] = [],  # noqa: B006 - typer's way of a repeatable option
    rollout: Annotated[
        list[str],
        typer.Option(help="a rollout budget, e.g. max_completion_tokens=8192 (repeatable)"),
    ] = [],  # noqa: B006
    scoring: Annotated[
        Optional[str],
        typer.Option(help="the verifier's mode, e.g. paper or lenient (default: the domain's)"),
    ] = None,
):
    """Evaluate any harness file: progress bar, then mean@k and failures by reason."""
    from app.read.benchmarks import benchmarks_line

    try:
        get_domain(domain).tasks(split)
        scoring = scoring_of(get_domain(domain), scoring)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if sandbox not in (None, "process", "docker"):
        raise typer.BadParameter(f"sandbox {sandbox!r} is not a backend; use process or docker")
    declared = {
        "sampling": settings_table(sampling, Sampling, "--sampling"),
        "rollout": settings_table(rollout, RolloutLimits, "--rollout"),
        "scoring": scoring,
    }

    async def main():
        from app.workbench import make_workbench

        workbench = make_workbench(say=(lambda m: None) if as_json else None, sandbox=sandbox)
        call_fields = Sampling.model_validate(declared["sampling"]).defaults()  # not `fixed`
        refused = refused_fields(call_fields, workbench.backend_name)
        if refused:
            raise typer.BadParameter(f"--sampling: {refused}")
        try:
            await workbench.start()
            run, evaluation, statuses, reasons = await evaluate(
                workbench, harness, domain, split, k, limit, quiet=as_json, declared=declared
            )
        finally:
            await workbench.stop()
        breakdown = stored_benchmarks(evaluation.id)
        if as_json:
            print(
                json.dumps(
                    {
                        "run_id": run.id,
                        "evaluation_id": evaluation.id,
                        "mean_at_k": evaluation.mean_at_k,
                        # where tasks name their benchmark: each one's mean@k and their mean
                        "benchmarks": breakdown and breakdown["benchmarks"],
                        "macro_mean_at_k": breakdown and breakdown["macro_mean_at_k"],
                        "ci": [evaluation.ci_low, evaluation.ci_high],  # 95%, over the tasks
                        "scoring": evaluation.scoring,
                        "k": k,
                        "split": split,
                        "n_tasks": evaluation.n_tasks,
                        "n_rollouts": sum(statuses.values()),
                        "n_infra": evaluation.n_infra,
                        "statuses": dict(statuses),
                        "reasons": dict(reasons),
                        "mean_turns": evaluation.mean_turns,
                        "total_tokens": evaluation.total_tokens,
                    }
                )
            )
        else:
            print(summary_line(evaluation, statuses, reasons))
            if breakdown:
                print(benchmarks_line(breakdown))
            print(f"run {run.id} stored in {Settings().db_path}")

    uvloop.run(main())


# `whale train` and `whale search`: a harness file, or the domain's seed when none is given
SeedOrHarness = Annotated[
    Optional[Path],
    typer.Argument(exists=True, dir_okay=False, help="harness file (default: the domain's seed)"),
]


def train(
    harness: SeedOrHarness = None,
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
    from app.experiment_schema import RFTConfig
    from app.training.weight_phase import train_file

    try:
        the_domain = get_domain(domain)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    harness = harness or the_domain.seed_harness
    cfg = RFTConfig(
        prompts_per_step=prompts,
        samples_per_prompt=n,
        lr=lr,
        lora_rank=lora_rank,
        lora=not full,
    )

    async def main():
        from app.workbench import make_workbench

        workbench = make_workbench(say=(lambda m: None) if as_json else None)
        try:
            await workbench.start()
            with progress_bars() as progress:
                on = phase_progress(progress, quiet=as_json)
                run_id, result = await train_file(
                    workbench, harness, the_domain, cfg, steps, test_k, test_limit, on
                )
        finally:
            await workbench.stop()
        summary = {
            "run_id": run_id,
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
                f"run {run_id}, checkpoint {result.checkpoint.id}"
            )

    uvloop.run(main())


def search(
    harness: SeedOrHarness = None,
    domain: Annotated[str, typer.Option(help="task domain")] = "arith",
    proposer: Annotated[
        str, typer.Option(help="knobs | llm | agent | gepa, or an installed plugin's name")
    ] = "knobs",
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

    from app.experiment_schema import SearchConfig, describe
    from app.search.harness_phase import search_file
    from app.search.proposers import ProposerError, proposer_factory

    try:  # an unknown or broken proposer is named before any work, on one line
        proposer_factory(proposer)
    except ProposerError as exc:
        raise fail(f"--proposer: {exc}") from None
    try:
        the_domain = get_domain(domain)
        cfg = SearchConfig(
            proposer=proposer,
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
        from app.workbench import make_workbench

        workbench = make_workbench(say=(lambda m: None) if as_json else None)
        try:
            await workbench.start()
            with progress_bars() as progress:
                on = phase_progress(progress, quiet=as_json)
                phase = await search_file(workbench, harness, domain, cfg, iterations, on)
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

    try:
        uvloop.run(main())
    except ProposerError as exc:  # a plugin that does not load or start
        raise fail(str(exc)) from None


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


COMMANDS = [(eval_, "eval"), (train, "train"), (search, "search")]
