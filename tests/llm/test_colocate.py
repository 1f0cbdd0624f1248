"""Colocation (`[runtime] colocate`): vLLM sleeps while the trainer trains on its GPUs and
wakes before the new weights are loaded in place, checked against a stand-in for vLLM's sleep
mode (tests/llm/vllm_standin.py) with a real workbench, sandbox and training process."""

import asyncio
from pathlib import Path

import pytest

from app.llm.vllm import VLLMBackend, VLLMError, VLLMServer
from tests.llm.vllm_standin import sleepy_vllm


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

    order = [name for name, _, _ in calls if name != "chat"]
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
