"""A training process killed in a loop (SIGKILL, which is also how an out-of-memory kill reads):
tried once more, then the job is marked failed with its log tail and the run pauses naming it;
the checkpoints trained before stay whole and served; `resume`, also after a restart, trains
the step again and the run finishes (docs/faults.md)."""

import asyncio
import hashlib
import json
from pathlib import Path

from sqlmodel import select

from app import control
from app.db import open_engine, read_session
from app.db.schema import Checkpoint, Event, Run, TrainingJob
from app.loop.driver import Loop
from app.read.invariants import checkpoint_problem
from app.training.rft import TRAINING_TRIES
from tests.conftest import attached_settings, started_workbench
from tests.faults.test_disk_full import started_loop
from tests.loop.conftest import quick_toml, store_invariants
from tests.training.test_rft import ORACLE, kill_training


def adapter_digest(checkpoint: Checkpoint) -> str:
    return hashlib.sha256(
        (Path(checkpoint.path) / "adapter" / "adapter_model.safetensors").read_bytes()
    ).hexdigest()


def test_a_training_killed_twice_pauses_the_run_keeps_earlier_checkpoints_and_resumes(
    tmp_path, model_server, model_cache
):
    home = tmp_path / "home"
    settings = attached_settings(home, model_server, model_cache)
    # two weight phases of one step each; every rollout is accepted, so each step trains
    source = quick_toml(
        "training-killed", "weight_only", rollouts=16, test={"at_start": "false"}
    ).replace('domain = "arith"', f'domain = "arith"\nharness_code = {json.dumps(ORACLE)}')
    # the first job trains; every process of the second is killed until the run pauses
    killed = kill_training(
        home, times=TRAINING_TRIES, once=home / "training" / "job-2" / "spec.json"
    )

    async def main():
        async with started_workbench(settings) as wb:
            run, loop = await started_loop(wb, source)
            first = None
            while True:
                with wb.session() as s:
                    if first is None and (
                        c := s.exec(
                            select(Checkpoint).where(Checkpoint.training_job_id == 1)
                        ).first()
                    ):
                        first, digest = c, adapter_digest(c)
                    if s.get(Run, run.id).status == "paused":
                        jobs = s.exec(select(TrainingJob).order_by(TrainingJob.id)).all()
                        break
                assert not loop.done(), loop
                await asyncio.sleep(0.3)
            assert [j.status for j in jobs] == ["done", "failed"]
            assert "exited with code -9" in jobs[1].error and "$ " in jobs[1].error  # its log
            # the checkpoint trained before is whole, unchanged and still answers
            assert checkpoint_problem(first) is None and adapter_digest(first) == digest
            reply = await wb.endpoint.chat(
                first.name, [{"role": "user", "content": "What is 2 + 3?"}], max_tokens=4
            )
            assert reply["choices"][0]["message"]["content"] is not None
            # the workbench stops while the run is paused on the job (the same process
            # resuming it is the disk-full test's path); the next one trains it on resume
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            loop = asyncio.create_task(Loop(wb, run.id).run())
            await control.apply(wb.writer, run.id, "resume", "tried again", source="test")
            await asyncio.wait_for(loop, 600)
            return run.id, first, digest

    run_id, first, digest = asyncio.run(main())
    assert len(killed) == TRAINING_TRIES
    store_invariants(home / "whale.db")
    assert adapter_digest(first) == digest
    engine = open_engine(home / "whale.db")
    with read_session(engine) as s:
        assert s.get(Run, run_id).status == "done"
        jobs = s.exec(select(TrainingJob).order_by(TrainingJob.id)).all()
        events = s.exec(select(Event).order_by(Event.id)).all()
        second = s.get(Checkpoint, jobs[1].checkpoint_out_id)
    engine.dispose()
    assert [(j.step, j.status, j.error) for j in jobs] == [(0, "done", None), (1, "done", None)]
    assert second.parent_id == first.id  # the step trained again from the same checkpoint
    retries = [e.detail for e in events if e.kind == "training_retry"]
    assert [(r["job_id"], r["attempt"]) for r in retries] == [(2, 1)]
    pauses = [e.detail for e in events if e.kind == "control" and e.detail["action"] == "pause"]
    assert [p["source"] for p in pauses] == ["loop"]
    assert pauses[0]["reason"].startswith(
        f"training job 2 failed {TRAINING_TRIES} times: training process exited with code -9"
    )
