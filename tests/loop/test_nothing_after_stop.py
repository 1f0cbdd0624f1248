"""The loop driver on a real store: after a stop nothing new is created (no test evaluation
once a training step ends, no phase); a phase start, the moment a pause takes effect and the
resume after it are each an event of the run's log."""

import asyncio
import time

import pytest
from sqlmodel import col, select

from app.db.schema import Checkpoint, Evaluation, Event, Harness, Phase, Rollout, Run
from app.loop.driver import Loop, begin, new_experiment_run
from app.loop.experiment_file import load
from app.rollout.evaluate import Evaluator, RunStopped
from tests.api.synthetic_store import store, workbench  # noqa: F401 - fixtures
from tests.conftest import REPO


@pytest.fixture
def loop(store, workbench):  # noqa: F811
    """A Loop on a whale run of experiments/arith-quick.toml, begun on a base checkpoint."""
    experiment, _ = load(REPO / "experiments" / "arith-quick.toml")
    base = store.write(Checkpoint(name="smol-base", kind="base"))

    def create(s):
        incoming = ("seed.py", "def run(t, l, x):\n")
        run = new_experiment_run(s, experiment, "arith-quick.toml", "h", incoming)
        return begin(s, run.id, s.get(Checkpoint, base.id))

    run = workbench.writer.submit(create).result()
    return Loop(workbench, run.id)


def rows(workbench, model, *where):  # noqa: F811
    with workbench.session() as s:
        return list(s.exec(select(model).where(*where)))


def log(workbench, run_id):  # noqa: F811
    return [e.kind for e in rows(workbench, Event, Event.run_id == run_id)]


def test_a_stop_asked_during_a_training_step_creates_no_test_evaluation(loop, store, workbench):  # noqa: F811
    """The step ends after the stop was asked: its test point (every_weight_steps, after_phase)
    and the next phase are not created, where the evaluation used to be made and closed empty."""
    harness_id, checkpoint_id = loop.start["harness_id"], loop.start["checkpoint_id"]
    # the stop lands while the step trains: the loop's last poll still says "running"
    store.write_values(rows(workbench, Run, Run.id == loop.run_id)[0], desired="stopped")
    assert loop.desired == "running"

    with pytest.raises(RunStopped):
        asyncio.run(loop._test_point(harness_id, checkpoint_id))
    with pytest.raises(RunStopped):
        asyncio.run(loop._next_phase())
    # an evaluation asked for by a phase (a search iteration, an RFT sampling) is refused too
    workbench.gates[loop.run_id] = loop  # as Loop.run registers it
    evaluator = Evaluator(
        workbench.writer, None, None, workbench.settings.home, gates=workbench.gates
    )
    with workbench.session() as s:
        harness, checkpoint = s.get(Harness, harness_id), s.get(Checkpoint, checkpoint_id)
    with pytest.raises(RunStopped):
        asyncio.run(evaluator.create(loop.run_id, harness, checkpoint, loop.domain, "test", 1, 4))

    assert rows(workbench, Evaluation, Evaluation.run_id == loop.run_id) == []
    assert rows(workbench, Phase, Phase.run_id == loop.run_id) == []


def test_a_phase_start_is_logged_with_the_pair_it_starts_from(loop, workbench):  # noqa: F811
    phase = asyncio.run(loop._next_phase())
    started = rows(workbench, Event, Event.run_id == loop.run_id, Event.kind == "phase_start")
    assert [e.detail for e in started] == [
        {
            "phase_id": phase.id,
            "kind": "weight",
            "round": 1,
            "harness_id": loop.start["harness_id"],
            "checkpoint_id": loop.start["checkpoint_id"],
        }
    ]


def test_paused_is_logged_once_nothing_runs_and_resumed_after(loop, store, workbench):  # noqa: F811
    """ "pause asked" is the request; "paused" comes once nothing the run started still runs
    (its badge turns from pausing to paused), "resumed" once it runs again."""
    run = rows(workbench, Run, Run.id == loop.run_id)[0]
    harness = loop.start["harness_id"]
    with workbench.session() as s:
        checkpoint = s.get(Checkpoint, loop.start["checkpoint_id"])
    evaluation = store.write(
        Evaluation(
            run_id=run.id,
            harness_id=harness,
            checkpoint_id=checkpoint.id,
            split="test",
            k=1,
            n_tasks=1,
        )
    )
    running = store.write(
        Rollout(
            run_id=run.id,
            evaluation_id=evaluation.id,
            harness_id=harness,
            checkpoint_id=checkpoint.id,
            task_id="t",
            sample=0,
            started_at=run.created_at,
        )
    )
    store.write_values(run, status="running", desired="paused")

    def watch_until(kinds: list[str], timeout: float = 10) -> list[str]:
        async def watch():
            watcher = asyncio.create_task(loop._watch())
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                held = [k for k in log(workbench, run.id) if k in ("paused", "resumed")]
                if held == kinds:
                    break
                await asyncio.sleep(0.1)
            watcher.cancel()
            return held

        return asyncio.run(watch())

    # a rollout still runs: pausing, not paused (the stored status already says paused)
    assert watch_until(["paused"], timeout=2) == []
    assert rows(workbench, Run, Run.id == run.id)[0].status == "paused"
    store.write_values(running, status="pass")
    assert watch_until(["paused"]) == ["paused"]
    store.write_values(run, desired="running")
    assert watch_until(["paused", "resumed"]) == ["paused", "resumed"]
    assert rows(workbench, Run, Run.id == run.id)[0].status == "running"
    # a stop asked while paused ends the pause without a resume
    store.write_values(run, desired="paused")
    assert watch_until(["paused", "resumed", "paused"]) == ["paused", "resumed", "paused"]
    store.write_values(run, desired="stopped")
    watch_until(["never"], timeout=1.5)
    kinds = [
        e.kind
        for e in rows(
            workbench, Event, Event.run_id == run.id, col(Event.kind).in_(("paused", "resumed"))
        )
    ]
    assert kinds == ["paused", "resumed", "paused"]
