"""A stop asked while an RFT step samples ends the run before the step trains: no training
process starts, no checkpoint is recorded, and the job is closed as stopped."""

import asyncio

import pytest
from sqlmodel import select

from app.db.schema import Checkpoint, Harness, TrainingJob
from app.domains import get_domain
from app.experiment_schema import RFTConfig
from app.phases import close_open_work
from app.rollout.evaluate import RunStopped
from app.training.rft import rft_step
from tests.api.synthetic_store import store, workbench  # noqa: F401 - fixtures
from tests.api.synthetic_training import weight_phase


def test_no_training_starts_once_a_stop_is_asked(store, workbench):  # noqa: F811
    phase = weight_phase(store, [["pass", "fail", "pass"]], last="training")
    job = phase.jobs[-1]
    store.write_values(phase.run, desired="stopped")
    with workbench.session() as s:
        harness = s.get(Harness, job.harness_id)
        before = len(s.exec(select(Checkpoint)).all())

    with pytest.raises(RunStopped):
        asyncio.run(
            rft_step(
                workbench,
                phase.run.id,
                harness,
                phase.base,
                get_domain("arith"),
                RFTConfig(),
                job.step,
                job=job,
            )
        )

    assert not (workbench.settings.home / "training" / f"job-{job.id}").exists()
    store.writer.submit(
        lambda s: close_open_work(s, phase.run.id, "stopped", "by request")
    ).result()
    with workbench.session() as s:
        assert len(s.exec(select(Checkpoint)).all()) == before
        stopped = s.get(TrainingJob, job.id)
        assert (stopped.status, stopped.checkpoint_out_id) == ("failed", None)
        assert stopped.error == "the run stopped: by request"
