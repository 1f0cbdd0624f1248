"""Colocation (`[runtime] colocate`): vLLM sleeps while the trainer trains on its GPUs and
wakes before the new weights are loaded in place, checked against a stand-in for vLLM's sleep
mode (tests/llm/vllm_standin.py) with a real workbench, sandbox and training process."""

import asyncio
import errno
import logging
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from app.llm.vllm import VLLMBackend, VLLMError, VLLMServer
from tests.llm.vllm_standin import sleepy_vllm


def _asleep(url: str) -> bool:
    """What the server itself says (vLLM's GET /is_sleeping)."""
    return httpx.get(url.removesuffix("/v1") + "/is_sleeping").json()["is_sleeping"]


def _root(url: str) -> str:
    return url.removesuffix("/v1")


def _names(calls) -> list[str]:
    return [name for name, _, _ in calls]


def _checkpoints(home: Path) -> int:
    """Full fine-tune weights written so far (a step's checkpoint, renamed into place whole)."""
    return len(list((home / "checkpoints").glob("run-*/job-*/merged")))


def test_vllm_sleeps_through_each_training_step_then_takes_the_weights_in_place(
    tmp_path, model_cache
):
    from app.domains import get_domain
    from app.experiment_schema import RFTConfig
    from app.llm.local import prepare_model
    from app.runs import open_run, read_harness
    from app.training.rft import rft_step
    from app.workbench import Workbench
    from tests.llm.test_vllm import oracle_on_vllm

    base = prepare_model(model_cache, say=lambda m: None)
    home = tmp_path / "home"
    cfg = RFTConfig(prompts_per_step=2, samples_per_prompt=1, lora=False, batch_size=2, lr=1e-5)
    with sleepy_vllm(str(base), probe=lambda: _checkpoints(home)) as (url, calls):
        harness_path, settings = oracle_on_vllm(
            tmp_path, model_cache, vllm_urls=url, llm_model=str(base), colocate=True
        )

        async def two_steps():
            workbench = Workbench(settings, say=lambda m: None)
            await workbench.start()
            try:
                made = await open_run(
                    workbench, "colocated", "rft", "arith", read_harness(harness_path), {}
                )
                run, harness, checkpoint = made.run, made.harness, made.checkpoint
                names = []
                for step in range(2):  # the training process ends with each step, and restarts
                    _, checkpoint = await rft_step(
                        workbench, run.id, harness, checkpoint, get_domain("arith"), cfg, step
                    )
                    names.append(checkpoint.name)
                return names
            finally:
                await workbench.stop()

        names = asyncio.run(two_steps())

    order = [name for name in _names(calls) if name != "chat"]
    in_place = ["collective_rpc reload_weights", "reset_prefix_cache"]
    assert order == (["sleep level=1", "wake_up", *in_place] * 2)
    # trained while asleep: no checkpoint when it fell asleep, the step's own when it woke
    at = {}
    for name, checkpoints, _ in calls:
        at.setdefault(name, []).append(checkpoints)
    assert at["sleep level=1"] == [0, 1] and at["wake_up"] == [1, 2]
    assert not [c for c in calls if c[2]], "a request reached the server while it slept"
    # each step's sampling asked the weights served then: the base, then step 0's, by name
    assert len(names) == 2 and all(n.endswith("/merged") for n in names)


def test_a_server_without_sleep_mode_is_named(tmp_path):
    from tests.openai_stub import openai_stub

    with openai_stub("4") as (url, _):
        backend = VLLMBackend([url], model="m")
        backend.urls = [url]
        with pytest.raises(VLLMError, match="--enable-sleep-mode and VLLM_SERVER_DEV_MODE=1"):
            asyncio.run(backend.sleep())


def test_a_colocated_launch_enables_sleep_mode_on_its_gpus(tmp_path):
    server = VLLMServer("python", tmp_path, tmp_path / "log", sleep_mode=True, gpus="0,1")
    assert "--enable-sleep-mode" in server.command()
    env = server.env()
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "--enable-sleep-mode" not in VLLMServer("python", tmp_path, tmp_path / "l").command()


# --- replicas: sleep all or none, wake every one ---------------------------------------------


def test_a_replica_that_cannot_sleep_leaves_none_asleep_and_is_named():
    with sleepy_vllm("m") as (one, calls1), sleepy_vllm("m", fail={"sleep": 1}) as (two, _):
        backend = VLLMBackend([one, two], model="m")
        with pytest.raises(VLLMError, match="sleep at .*out of memory") as raised:
            asyncio.run(backend.sleep())
        assert _root(two) in str(raised.value) and f"{_root(one)} woken again" in str(raised.value)
        assert not _asleep(one) and not _asleep(two)
        assert _names(calls1) == ["sleep level=1", "wake_up"]


def test_a_replica_that_cannot_wake_does_not_keep_the_others_asleep():
    with sleepy_vllm("m", fail={"wake_up": 1}) as (one, _), sleepy_vllm("m") as (two, _):
        backend = VLLMBackend([one, two], model="m")
        asyncio.run(backend.sleep())
        with pytest.raises(VLLMError, match="did not wake: wake_up at .*out of memory") as raised:
            asyncio.run(backend.wake_up())
        assert _root(one) in str(raised.value) and _root(two) not in str(raised.value)
        assert _asleep(one) and not _asleep(two)
        asyncio.run(backend.ensure_awake())  # what runs before the next sampling
        assert not _asleep(one)


def test_an_attached_server_left_asleep_is_woken_before_the_base_is_loaded_back(model_cache):
    from app.llm.local import prepare_model

    base = prepare_model(model_cache, say=lambda m: None)
    with sleepy_vllm(str(base)) as (url, calls):
        httpx.post(_root(url) + "/sleep", params={"level": 1})  # a workbench ended mid-step

        async def attach_and_restore():
            backend = VLLMBackend([url], model=str(base), say=lambda m: None)
            await backend.start()
            await backend.restore_base()
            await backend.stop()

        asyncio.run(attach_and_restore())
        assert not _asleep(url)
    in_place = ["collective_rpc reload_weights", "reset_prefix_cache"]
    assert _names(calls) == ["sleep level=1", "wake_up", *in_place]
    assert not [c for c in calls if c[2]], "a request reached the server while it slept"


# --- the training turn ----------------------------------------------------------------------


@asynccontextmanager
async def colocated(tmp_path, model_cache, url):
    """A started workbench attached to the stand-in, colocated; the oracle harness's path."""
    from app.llm.local import prepare_model
    from app.workbench import Workbench
    from tests.llm.test_vllm import oracle_on_vllm

    base = prepare_model(model_cache, say=lambda m: None)
    harness_path, settings = oracle_on_vllm(
        tmp_path, model_cache, vllm_urls=url, llm_model=str(base), colocate=True
    )
    workbench = Workbench(settings, say=lambda m: None)
    await workbench.start()
    try:
        yield workbench, harness_path
    finally:
        await workbench.stop()


class EndsOnAFullDisk:
    """A training process whose end fails as one does on a full disk (its last optimizer state
    cannot be written)."""

    async def close(self):
        raise OSError(errno.ENOSPC, "No space left on device")


def _standin_model(model_cache) -> str:
    from app.llm.local import prepare_model

    return str(prepare_model(model_cache, say=lambda m: None))


def test_vllm_wakes_when_the_training_process_fails_to_end(tmp_path, model_cache):
    with sleepy_vllm(_standin_model(model_cache)) as (url, calls):

        async def turn():
            async with colocated(tmp_path, model_cache, url) as (workbench, _):
                async with workbench.training_turn(EndsOnAFullDisk()):
                    pass

        with pytest.raises(OSError, match="No space left on device"):
            asyncio.run(turn())
        assert not _asleep(url)
    assert _names(calls) == ["sleep level=1", "wake_up"]


def test_a_failed_step_is_raised_over_a_failed_wake_and_the_next_rollout_wakes_vllm(
    tmp_path, model_cache, caplog
):
    from app.training.job import Trainer, TrainingError

    with sleepy_vllm(_standin_model(model_cache), fail={"wake_up": 1}) as (url, calls):

        async def turn():
            async with colocated(tmp_path, model_cache, url) as (workbench, _):
                with pytest.raises(TrainingError, match="killed"):
                    async with workbench.training_turn(Trainer(tmp_path / "trainer")):
                        raise TrainingError("training process exited with code -9: killed")
                assert _asleep(url)  # the wake failed: logged, not raised over the step's error
                await workbench._model_up()  # before each rollout's try
                assert not _asleep(url)

        with caplog.at_level(logging.WARNING, logger="app.workbench"):
            asyncio.run(turn())
    assert "vllm_wake_failed" in caplog.text and "out of memory" in caplog.text
    assert _names(calls) == ["sleep level=1", "wake_up", "wake_up"]


def test_a_failed_wake_after_a_good_step_is_the_error(tmp_path, model_cache):
    from app.training.job import Trainer

    with sleepy_vllm(_standin_model(model_cache), fail={"wake_up": 1}) as (url, _):

        async def turn():
            async with colocated(tmp_path, model_cache, url) as (workbench, _):
                async with workbench.training_turn(Trainer(tmp_path / "trainer")):
                    pass

        with pytest.raises(VLLMError, match=f"vLLM did not wake: wake_up at {_root(url)}"):
            asyncio.run(turn())


FULL_DISK = (
    "import sys; print('OSError: [Errno 28] No space left on device', file=sys.stderr); sys.exit(1)"
)


def test_a_run_paused_by_a_failed_training_waits_with_vllm_awake(tmp_path, model_cache):
    """A training try that fails on a full disk pauses the run until it is resumed: vLLM is
    awake while it waits (other runs sample), and sleeps again for the next try."""
    from app import control
    from app.db.schema import Run, TrainingJob
    from app.rollout.evaluate import RunStopped
    from app.runs import open_run, read_harness
    from app.training.job import Trainer
    from app.training.rft import _train

    async def until(check):
        for _ in range(600):
            if await asyncio.to_thread(check):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("timed out")

    with sleepy_vllm(_standin_model(model_cache)) as (url, calls):

        async def paused_twice():
            async with colocated(tmp_path, model_cache, url) as (workbench, harness_path):
                made = await open_run(
                    workbench, "paused", "experiment", "arith", read_harness(harness_path), {}
                )
                run_id = made.run.id

                def add_job(s):
                    job = TrainingJob(
                        run_id=run_id,
                        harness_id=made.harness.id,
                        checkpoint_in_id=made.checkpoint.id,
                        step=0,
                        status="training",
                    )
                    s.add(job)
                    s.flush()
                    return job

                job = await workbench.writer.run(add_job)
                trainer = Trainer(tmp_path / "trainer", [sys.executable, "-c", FULL_DISK])
                training = asyncio.create_task(
                    _train(workbench, job, {}, tmp_path / "job", tmp_path / "out", print, trainer)
                )

                def paused():
                    with workbench.session() as s:
                        return s.get(Run, run_id).desired == "paused"

                await until(paused)
                first = (_asleep(url), _names(calls))
                await control.apply(workbench.writer, run_id, "resume", "room again", "test")
                await until(paused)
                second = (_asleep(url), _names(calls))
                await control.apply(workbench.writer, run_id, "stop", "enough", "test")
                with pytest.raises(RunStopped):
                    await training
                return first, second

        first, second = asyncio.run(paused_twice())
    turn = ["sleep level=1", "wake_up"]
    assert first == (False, turn)
    assert second == (False, turn * 2)


def test_sampling_of_another_run_waits_while_vllm_sleeps(tmp_path, model_cache):
    """Two runs on one colocated server: run B's rollouts, started while run A trains, wait for
    vLLM to wake instead of failing on a sleeping server."""
    from sqlmodel import select

    from app.db.schema import Rollout
    from app.domains import get_domain
    from app.runs import open_run, read_harness
    from app.training.job import Trainer

    with sleepy_vllm(_standin_model(model_cache)) as (url, calls):

        async def both():
            async with colocated(tmp_path, model_cache, url) as (workbench, harness_path):
                made = await open_run(
                    workbench, "b", "experiment", "arith", read_harness(harness_path), {}
                )
                asleep = asyncio.Event()

                async def run_a_trains():
                    async with workbench.training_turn(Trainer(tmp_path / "trainer")):
                        asleep.set()
                        await asyncio.sleep(1.0)  # the step

                async def run_b_samples():
                    await asleep.wait()
                    evaluator = workbench.evaluator()
                    return await evaluator.evaluate(
                        made.run.id,
                        made.harness,
                        made.checkpoint,
                        get_domain("arith"),
                        "test",
                        1,
                        3,
                    )

                _, evaluation = await asyncio.gather(run_a_trains(), run_b_samples())
                with workbench.session() as s:
                    rollouts = s.exec(
                        select(Rollout).where(Rollout.evaluation_id == evaluation.id)
                    ).all()
                    return [r.status for r in rollouts]

        statuses = asyncio.run(both())
    names = _names(calls)
    assert names[:2] == ["sleep level=1", "wake_up"] and set(names[2:]) == {"chat"}, names
    assert not [c for c in calls if c[2]], "a request reached the server while it slept"
    assert len(statuses) == 3 and "infra" not in statuses and "error" not in statuses, statuses


def test_a_training_turn_waits_for_rollouts_in_flight_and_holds_new_ones_until_it_ends():
    from app.rollout.admission import Admission

    async def main():
        admission = Admission(4)
        order = []

        async def rollout(name: str, hold_s: float):
            async with admission.slot():
                order.append(f"{name} starts")
                await asyncio.sleep(hold_s)
                order.append(f"{name} ends")

        async def turn(step_s: float):
            async with admission.paused():
                order.append("asleep")
                later = asyncio.create_task(rollout("b", 0))
                await asyncio.sleep(step_s)
                order.append("awake")
            return later

        first = asyncio.create_task(rollout("a", 0.3))
        await asyncio.sleep(0.05)
        await (await turn(0.2))
        await first
        assert order == ["a starts", "a ends", "asleep", "awake", "b starts", "b ends"]
        # a turn stopped while it waits for the rollouts in flight holds nothing back after
        held = asyncio.create_task(rollout("c", 0.5))
        await asyncio.sleep(0.05)
        waiting = asyncio.create_task(turn(0))
        await asyncio.sleep(0.05)
        waiting.cancel()
        await asyncio.wait_for(rollout("d", 0), 0.3)  # c is still in flight: d did not wait
        await held

    asyncio.run(main())
