"""Making runs: the one constructor every run goes through, whatever started it.

A run is its row, its incoming harness and, in its config, where it starts (`start`: that
harness and the checkpoint). An experiment run (`whale run`, the web's start form) is made
`created` before the model is loaded, so its checkpoint is not known yet; it begins once the
base checkpoint is (app/loop/driver.py, `begin`). `whale eval`, `whale train` and `whale search`
make theirs running from the base checkpoint, with their one phase (`single_run`).
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.db.schema import Checkpoint, Harness, Phase, Run, now, sha_of
from app.db.writer import Writer


class RunMaker(Protocol):
    """What making a running run needs of the process's Workbench (app/workbench.py, which
    stands above this module): its writer and the base checkpoint's row."""

    writer: Writer

    def base_checkpoint(self, s) -> Checkpoint: ...


@dataclass
class NewRun:
    run: Run
    harness: Harness  # the incoming one
    checkpoint: Checkpoint | None  # what it starts from; None until it begins
    phase: Phase | None = None  # the one phase of a `whale train` or `whale search` run


def new_run(
    s,
    name: str,
    kind: str,
    domain: str,
    incoming: tuple[str, str],
    config: dict,
    checkpoint: Checkpoint | None = None,
    strategy: str | None = None,
    phase: str | None = None,
    fork: dict | None = None,
) -> NewRun:
    """A run, in the writer's session `s`: its row, its incoming harness (file name, code) and
    its start. With a `checkpoint` it is running from it, else `created` until it begins. `phase`
    ("weight" or "harness"): the one phase it holds, round 1, from the incoming pair. `fork`: the
    fork point it starts from (app/loop/fork.py, fork_point): its harness is the parent's there,
    not `incoming`, and it begins from the parent's checkpoint there."""
    if fork:
        config = {**config, "fork": fork}
    run = Run(
        name=name,
        kind=kind,
        domain=domain,
        status="running" if checkpoint else "created",
        strategy=strategy,
        desired="running",
        config=config,
        parent_run_id=fork["run_id"] if fork else None,
        fork_phase=fork["phase"] if fork else None,
    )
    s.add(run)
    s.flush()
    if fork:
        harness = s.get(Harness, fork["harness_id"])
    else:
        harness_name, code = incoming
        harness = Harness(run_id=run.id, name=harness_name, code=code, sha=sha_of(code))
        s.add(harness)
        s.flush()
    start = {"harness_id": harness.id, "checkpoint_id": checkpoint.id if checkpoint else None}
    run.config = {**config, "start": start}
    row = None
    if phase:
        row = Phase(
            run_id=run.id,
            kind=phase,
            round=1,
            harness_in_id=harness.id,
            checkpoint_in_id=checkpoint.id,
        )
        s.add(row)
        s.flush()
    return NewRun(run, harness, checkpoint, row)


def read_harness(path: Path) -> tuple[str, str]:
    """(file name, code) of a harness file, as new_run takes it."""
    return path.name, path.read_text()


async def open_run(
    workbench: RunMaker,
    name: str,
    kind: str,
    domain: str,
    incoming: tuple[str, str],
    config: dict,
    phase: str | None = None,
) -> NewRun:
    """new_run, running from the base checkpoint (the workbench is started), through the
    writer; the caller ends it (finish_run)."""
    return await workbench.writer.run(
        lambda s: new_run(
            s, name, kind, domain, incoming, config, workbench.base_checkpoint(s), phase=phase
        )
    )


@asynccontextmanager
async def single_run(
    workbench: RunMaker,
    name: str,
    kind: str,
    domain: str,
    harness_path: Path,
    config: dict,
    phase: str | None = None,
) -> AsyncIterator[NewRun]:
    """A run of one command (`whale eval`, `train`, `search`) of a harness file, running from the
    base checkpoint (the workbench is started); it ends `done` with the block, or `failed` when
    the block raises (an interrupt included)."""
    made = await open_run(workbench, name, kind, domain, read_harness(harness_path), config, phase)
    try:
        yield made
    except BaseException:
        await workbench.writer.run(lambda s: finish_run(s, made.run.id, "failed"))
        raise
    made.run = await workbench.writer.run(lambda s: finish_run(s, made.run.id, "done"))


def finish_run(s, run_id: int, status: str) -> Run:
    run = s.get(Run, run_id)
    run.status = status
    run.finished_at = now()
    return run
