"""Progress on the terminal: rich bars on stderr, fed by the phases' progress callbacks."""

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

err = Console(stderr=True, soft_wrap=True)  # a message stays one line, whatever the width


def progress_bars() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("pass {task.fields[passed]}"),
        TimeElapsedColumn(),
        console=err,
    )


def phase_progress(progress: Progress, quiet: bool):
    """The progress callback of a phase: one bar per stage, a line per notable event."""
    bar = progress.add_task("", total=None, passed=0, visible=not quiet)

    def on(kind, data):
        if kind == "phase":
            progress.reset(bar, description=data["what"], total=None, passed=0)
        elif kind == "rollout":
            progress.update(
                bar,
                advance=1,
                passed=progress.tasks[bar].fields["passed"] + (data["rollout"].status == "pass"),
            )
        elif kind == "batch":
            progress.update(
                bar,
                description=f"training batch {data['batch']}/{data['of']} loss {data['loss']:.3f}",
            )
        elif quiet:
            return
        elif kind == "accepted":
            progress.console.print(
                f"accepted {data['accepted']}/{data['total']} rollouts: {data['examples']} examples"
            )
        elif kind == "iteration":
            it = data["iteration"]
            progress.console.print(
                f"iteration {it.iteration}: {it.n_valid}/{it.n_candidates} valid, best "
                f"{it.best_success:.3f} (harness #{it.best_harness_id}), accepted "
                f"#{it.accepted_harness_id}"
                + (f"; proposer failed: {it.error}" if it.error else "")
            )
        elif kind == "test":
            e = data["evaluation"]
            ci = f" [{e.ci_low:.3f}, {e.ci_high:.3f}]" if e.ci_low is not None else ""
            progress.console.print(
                f"test mean@{e.k} = {e.mean_at_k:.3f}{ci} (harness #{e.harness_id}, "
                f"checkpoint #{e.checkpoint_id}) after {data['rollouts']} rollouts"
            )
        elif kind == "end":
            progress.console.print(f"run {data['status']}: {data['reason']}")

    return on
