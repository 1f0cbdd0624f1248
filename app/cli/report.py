"""`whale compare`, `whale export` and `whale import`: the report functions as commands over
$WHALE_HOME.

The read and report modules (numpy, FastAPI's parameters) are imported by the commands that use
them, so that every other `whale` command starts without them."""

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app.cli.base import BAD_INPUT
from app.config import Settings
from app.progress import err


@contextmanager
def store_session():
    """A read session on the store; unknown runs or no store end the command with a message."""
    from app.db import open_engine, read_session
    from app.read.runs import UnknownRuns

    path = Settings().db_path
    if not path.exists():  # opening would create an empty store
        err.print(f"[red]no store at {path}[/red] (set WHALE_HOME)")
        raise typer.Exit(BAD_INPUT)
    engine = open_engine(path)
    try:
        with read_session(engine) as session:
            yield session
    except UnknownRuns as exc:
        err.print(f"[red]{exc}[/red] ({path})")
        raise typer.Exit(BAD_INPUT) from None
    finally:
        engine.dispose()


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _scored(value: float | None, ci: list[float] | None) -> str:
    """A table cell: the score, its interval on a second line when it has one."""
    return _score(value) + (f"\n{interval(ci)}" if ci else "")


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def compare_table(rows: list[dict]) -> Table:
    """One row per run. The numbers fit 80 columns; the free-text name comes last and is the
    only column that wraps, so a narrow terminal folds it and never truncates a number."""
    table = Table(title="test mean@k by run", box=box.SIMPLE_HEAD, padding=0)
    for header in ("run", "strategy", "status"):
        table.add_column(header, no_wrap=True)
    for header in (
        "k",
        "selected",
        "max over\ntest",
        "rollouts\nto max",
        "final",
        "rollouts\nused",
        "test\npoints",
    ):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("name", overflow="fold")
    for r in rows:
        table.add_row(
            f"#{r['id']}",
            r["strategy"],
            r["status"],
            _count(r["k"]),
            _scored(r["selected"], r["selected_ci"]),
            _scored(r["best"], r["best_ci"]),
            _count(r["rollouts_to_best"]),
            # the pair it ended with, untested: no other pair's score in its place
            "untested"
            if r["final_pair"]["tested"] is False
            else _scored(r["final"], r["final_ci"]),
            _count(r["rollouts_used"]),
            str(r["test_points"]),
            r["name"],
        )
    table.caption = escape(
        "selected: the test score of the pair chosen on the harness split (the last test point "
        "without one); max over test: the best test point, chosen on test (the paper's figure); final: "
        "the pair the run ended with, untested where no test point measured it. "
        "[lo, hi]: 95% interval over the test tasks; one run (one seed) each"
    )
    return table


def interval(ci: list[float] | None) -> str:
    """A 95% interval as the tables print it: `[lo, hi]`, empty without one."""
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


def paired_lines(rows: list[dict], baseline: int) -> list[str]:
    """Each other run's final test score against the baseline's, paired on shared tasks."""
    lines = []
    for r in rows:
        if r["id"] == baseline:
            continue
        p = r["paired"]
        if p is None:
            lines.append(f"#{r['id']} vs #{baseline}: no shared finished test evaluation")
            continue
        interval = f" [{p['low']:+.3f}, {p['high']:+.3f}]" if p["low"] is not None else ""
        lines.append(
            f"#{r['id']} vs #{p['against']}: final {p['difference']:+.3f}{interval}, "
            f"p = {p['p_value']:.3g} ({p['b_better']} tasks better, {p['a_better']} worse; "
            f"{p['design']})"
        )
    return lines


def format_group(group: dict, aggregate: dict) -> str:
    def figure(key: str) -> str:
        mean, ci = aggregate[f"{key}_mean"], aggregate[f"{key}_ci"]
        if mean is None:
            return "-"
        return f"{mean:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")

    pairs = aggregate.get("vs_baseline")
    return (
        f"group {group['name']!r}, seeds {', '.join(map(str, group['seeds']))}: selected test "
        f"mean@k {figure('selected')}, max over test {figure('best')}, final "
        f"{figure('final')} ({aggregate['design']})" + (f"; {seed_pairs(pairs)}" if pairs else "")
    )


def seed_pairs(pairs: dict) -> str:
    """A group's selected score against the baseline group's, paired by seed, in words."""
    interval = f" [{pairs['low']:+.3f}, {pairs['high']:+.3f}]" if pairs["low"] is not None else ""
    p = f", p = {pairs['p_value']:.3g}" if pairs["p_value"] is not None else ""
    return (
        f"selected minus {pairs['against']!r}: {pairs['difference']:+.3f}{interval}{p} "
        f"({pairs['design']})"
    )


def compare(
    run_ids: Annotated[list[int], typer.Argument(help="run ids to compare")],
    plot: Annotated[Path, typer.Option(help="where to write the figure (PNG)")] = Path(
        "compare.png"
    ),
    x: Annotated[str, typer.Option(help="x axis: rollouts | weight_steps | wall_s")] = "rollouts",
    as_json: Annotated[bool, typer.Option("--json", help="print the table as JSON")] = False,
    baseline: Annotated[
        Optional[int],
        typer.Option(help="the run the others are paired with (default: the oldest, lowest id)"),
    ] = None,
):
    """Runs side by side: best and final test mean@k, rollouts to the best; plus a figure."""
    from app.read.compare import NotCompared, baseline_of, compare_runs, groups
    from app.read.curves import X_LABELS, mixed_scales
    from app.report.plot import plot_accuracy_vs_rollouts  # loads matplotlib: only this command

    if x not in X_LABELS:
        raise typer.BadParameter(
            f"{x!r} is not an x axis; use {' | '.join(X_LABELS)}", param_hint="--x"
        )
    try:
        baseline = baseline_of(run_ids, baseline)
    except NotCompared as exc:
        raise typer.BadParameter(
            str(exc).removeprefix("baseline: "), param_hint="--baseline"
        ) from None
    with store_session() as session:
        rows = compare_runs(session, run_ids, baseline)
        plot_accuracy_vs_rollouts(session, run_ids, plot, x)
        seed_groups = groups(session, rows, baseline)
    if as_json:
        print(json.dumps({"runs": rows, "groups": seed_groups, "baseline": baseline}))
    else:
        Console().print(compare_table(rows))
        for line in paired_lines(rows, baseline):
            print(line)
        for g in seed_groups:
            print(format_group({"name": g["group"], "seeds": g["seeds"]}, g))
    for note in mixed_scales(rows):
        err.print(f"[yellow]note:[/yellow] {note}")
    err.print(f"figure: {plot}")


def export(
    run_id: Annotated[int, typer.Argument(help="the run to export")],
    out: Annotated[
        Optional[Path], typer.Option(help="folder (default: whale-export-run-<id>)")
    ] = None,
):
    """A run as plain files: run.json, harness .py files, one JSON lines file per table."""
    from app.report.export import export_run

    out = out or Path(f"whale-export-run-{run_id}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):  # never mix two exports
        err.print(f"[red]{out} is not empty[/red]; choose another --out")
        raise typer.Exit(BAD_INPUT)
    with store_session() as session:
        counts = export_run(session, run_id, out)
    for name, count in counts.items():
        print(f"{name:<26}{count:>10,}")
    print(f"run {run_id} exported to {out}")


def check(
    run_id: Annotated[int, typer.Argument(help="the run to check")],
    as_json: Annotated[bool, typer.Option("--json", help="print the checks as JSON")] = False,
):
    """Check what no fault may break in a run's records (docs/faults.md); exit 1 on a break."""
    from app.read.invariants import run_checks, store_checks

    with store_session() as session:
        checks = run_checks(session, run_id) + store_checks(session)
    if as_json:
        print(json.dumps([{**vars(c), "ok": c.ok} for c in checks], indent=1))
    else:
        out = Console(soft_wrap=True)
        for c in checks:
            mark = "[green]ok[/green]" if c.ok else f"[red]{len(c.broken)} broken[/red]"
            out.print(f"{mark} {c.name}: {escape(c.promise)}")
            for row in c.broken[:20]:
                out.print(f"    {escape(row)}")
            if len(c.broken) > 20:
                out.print(f"    ... and {len(c.broken) - 20} more")
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


def import_(
    folder: Annotated[Path, typer.Argument(help="a folder `whale export` wrote")],
):
    """A run exported by `whale export` read back into this store as a new run (new ids; tags,
    notes and labels kept)."""
    import asyncio

    from app.db import Writer, open_engine
    from app.report.import_run import NotAnExport, import_run

    path = Settings().db_path
    engine = open_engine(path)
    writer = Writer(engine)
    try:
        run_id = asyncio.run(import_run(writer, folder))
    except NotAnExport as exc:
        err.print(f"[red]{escape(str(exc))}[/red]; nothing was imported", soft_wrap=True)
        raise typer.Exit(BAD_INPUT) from None
    finally:
        writer.close()
        engine.dispose()
    print(f"{folder} imported as run {run_id} into {path}")


COMMANDS = [(compare, "compare"), (export, "export"), (import_, "import"), (check, "check")]
