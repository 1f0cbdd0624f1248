"""The local model server: transformers behind the OpenAI chat-completions protocol.

    python -m app.llm.local_server --port PORT

A thin layer, written because `transformers serve` does not hold up for rollouts: with
continuous batching every request shares the first request's sampling settings, a request's
seed is not its own, and temperature alone never turns sampling on. Here each request keeps its
own temperature, top_p, max_tokens, stop strings and seed (a torch.Generator per request), and
requests that arrive together are decoded together in one batch.

Native tool calls, as vLLM serves them: a request's `tools` (and `chat_template_kwargs`, e.g.
`enable_thinking`) go to the tokenizer's chat template, and when the request has tools a reply
holding `<tool_call>...</tool_call>` blocks comes back as `tool_calls` (`app/llm/tool_calls.py`
reads both the Hermes JSON form and Qwen3.5's XML form). `role: tool` messages and assistant
messages carrying `tool_calls` are rendered by the template like any other.

The `model` field of a request is a weights folder (the base, or a full fine-tune's weights)
or a LoRA adapter folder, merged into its base on load (`load_weights`): a LoRA checkpoint keeps
its adapter only, a few MB, where a merged copy is the whole model again. Folders are loaded on
first use and the least recently used is dropped past a few.
"""

import argparse
import asyncio
import json
import os
import queue
import secrets
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import torch
import uvicorn
from fastapi import FastAPI, HTTPException
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.llm.tool_calls import parse_tool_calls, template_messages

MAX_BATCH = int(os.environ.get("WHALE_LOCAL_MAX_BATCH", "32"))  # requests decoded together
# Decoding a small model on a CPU reads every weight once per token: bfloat16 halves what is read
# (1.3-1.8x the tokens per second on a CPU with bf16 instructions); float32 is the exact one.
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
MAX_MODELS = 3
# Requests of concurrent rollouts trickle in over tens of milliseconds: gather batch-mates until
# none arrived for QUIET_S, at most GATHER_S, since a request that misses a batch waits for it.
QUIET_S = 0.03
GATHER_S = 0.25


def load_weights(path: str | Path, dtype: torch.dtype) -> torch.nn.Module:
    """A causal LM from a weights folder, or from a LoRA adapter folder (its
    `adapter_config.json` names the base): base plus adapter, merged in float32, then cast."""
    config = Path(path) / "adapter_config.json"
    if not config.exists():
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    from peft import PeftModel

    base_path = json.loads(config.read_text())["base_model_name_or_path"]
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    return PeftModel.from_pretrained(base, str(path)).merge_and_unload().to(dtype)


class ChatRequest(BaseModel):
    """The fields this server implements; any other is refused (422), never ignored
    (app/llm/generation.py lists them as the local backend's)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[dict]
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    stop: str | list[str] | None = None
    tools: list[dict] | None = None
    chat_template_kwargs: dict | None = None
    return_token_ids: bool = False  # vLLM's field: the prompt and completion ids come back too


@dataclass
class _Job:
    request: ChatRequest
    future: Future = field(default_factory=Future)


class Engine:
    """One thread owns the models and decodes batches of requests for the same model."""

    def __init__(self, dtype: torch.dtype = torch.bfloat16):
        self.dtype = dtype
        self.models: OrderedDict[str, tuple] = OrderedDict()
        self.jobs: queue.Queue[_Job] = queue.Queue()
        self.submitted = self.answered = self.decoding = 0  # for /metrics
        threading.Thread(target=self._loop, daemon=True, name="decode").start()

    def submit(self, request: ChatRequest) -> Future:
        job = _Job(request)
        self.submitted += 1
        job.future.add_done_callback(self._answered)
        self.jobs.put(job)
        return job.future

    def _answered(self, _future: Future) -> None:
        self.answered += 1

    @property
    def waiting(self) -> int:
        """Requests that will not fit the next batch either: vLLM's meaning of waiting (not
        scheduled at its next step), for a server whose step is a whole batch."""
        return max(0, self.submitted - self.answered - self.decoding - MAX_BATCH)

    def _load(self, path: str):
        if path not in self.models:
            tokenizer = AutoTokenizer.from_pretrained(path)
            tokenizer.padding_side = "left"
            model = load_weights(path, self.dtype).eval()
            self.models[path] = (model, tokenizer)
            while len(self.models) > MAX_MODELS:
                self.models.popitem(last=False)
        self.models.move_to_end(path)
        return self.models[path]

    def _loop(self) -> None:
        waiting: list[_Job] = []
        while True:
            if not waiting:
                waiting.append(self.jobs.get())
            deadline = time.monotonic() + GATHER_S
            while len(waiting) < 4 * MAX_BATCH:
                wait = min(QUIET_S, deadline - time.monotonic())
                try:
                    waiting.append(self.jobs.get(timeout=max(0.0, wait)))
                except queue.Empty:
                    break
            model_name = waiting[0].request.model
            batch = [j for j in waiting if j.request.model == model_name][:MAX_BATCH]
            waiting = [j for j in waiting if j not in batch]
            self.decoding = len(batch)
            try:
                results = self._generate(model_name, [j.request for j in batch])
                for job, result in zip(batch, results):
                    job.future.set_result(result)
            except Exception as exc:  # noqa: BLE001 - reported to each request of the batch
                for job in batch:
                    job.future.set_exception(exc)
            finally:
                self.decoding = 0

    @torch.no_grad()
    def _generate(self, model_name: str, requests: list[ChatRequest]) -> list[dict]:
        model, tokenizer = self._load(model_name)
        prompts = [
            tokenizer.apply_chat_template(
                template_messages(r.messages),
                tools=r.tools or None,
                add_generation_prompt=True,
                tokenize=False,
                **(r.chat_template_kwargs or {}),
            )
            for r in requests
        ]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        ids, mask = enc["input_ids"], enc["attention_mask"]
        prompt_tokens = mask.sum(dim=1).tolist()
        n = len(requests)
        generators = [
            torch.Generator().manual_seed(
                r.seed if r.seed is not None else secrets.randbelow(2**31)
            )
            for r in requests
        ]
        out: list[list[int]] = [[] for _ in range(n)]
        done = [False] * n
        finish = ["length"] * n
        cache, step_ids = None, ids
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        temperatures = torch.tensor([r.temperature for r in requests])
        top_ps = torch.tensor([r.top_p for r in requests])
        for _ in range(max(r.max_tokens for r in requests)):
            output = model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=positions,
                cache=cache,
                use_cache=True,
                logits_to_keep=1,  # the prompt's other positions' logits are never read
            )
            cache = output.cache
            chosen = _sample(output.logits[:, -1, :].float(), temperatures, top_ps, generators)
            for i, r in enumerate(requests):
                if done[i]:
                    chosen[i] = tokenizer.pad_token_id or 0
                    continue
                token = int(chosen[i])
                if token == tokenizer.eos_token_id:
                    done[i], finish[i] = True, "stop"
                    continue
                out[i].append(token)
                if _hit_stop(tokenizer, out[i], r.stop):
                    done[i], finish[i] = True, "stop"
                elif len(out[i]) >= r.max_tokens:
                    done[i] = True
            if all(done):
                break
            step_ids = chosen[:, None]
            mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype)], dim=1)
            positions = positions[:, -1:] + 1
        results = []
        for i, r in enumerate(requests):
            text = tokenizer.decode(out[i], skip_special_tokens=True)
            for s in _stops(r.stop):
                text = text.split(s)[0]
            # the ids as vLLM returns them: every id drawn, with the end-of-turn token that
            # stopped it (not in the text); a stop string or max_tokens has none
            eos = finish[i] == "stop" and not _hit_stop(tokenizer, out[i], r.stop)
            results.append(
                {
                    "content": text,
                    "finish_reason": finish[i],
                    "prompt_tokens": prompt_tokens[i],
                    "completion_tokens": len(out[i]),
                    "prompt_token_ids": ids[i][-prompt_tokens[i] :].tolist(),
                    "token_ids": out[i] + [tokenizer.eos_token_id] * eos,
                }
            )
        return results


def _sample(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    top_ps: torch.Tensor,
    generators: list[torch.Generator],
) -> torch.Tensor:
    """One token per row of `logits` (n x vocabulary): greedy where the temperature is 0, else
    drawn from the row's own generator by inverting its distribution's CDF (one uniform number
    per row; torch.multinomial took a millisecond per row, as long as a decoding step's matmuls
    at a batch of 16). Rows are softmaxed and nucleus-cut together."""
    greedy = logits.argmax(dim=-1)
    sampled = temperatures > 0
    if not sampled.any():
        return greedy
    probs = torch.softmax(logits / temperatures.clamp(min=1e-6)[:, None], dim=-1)
    nucleus = sampled & (top_ps < 1.0)
    if nucleus.any():
        sorted_probs, order = probs[nucleus].sort(dim=-1, descending=True)
        # a token stays when the mass before it is under top_p: the top token always stays
        cut = sorted_probs.cumsum(-1) - sorted_probs >= top_ps[nucleus][:, None]
        probs[nucleus] = torch.zeros_like(sorted_probs).scatter(
            -1, order, sorted_probs.masked_fill(cut, 0.0)
        )
    cdf = probs.cumsum(dim=-1)
    uniform = torch.cat([torch.rand(1, generator=g) for g in generators])
    # right=True: the first token whose CDF exceeds the draw, so a zero-probability token is
    # never chosen; the draw stays below the row's total, so the index stays in range
    drawn = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None], right=True)[:, 0]
    return torch.where(sampled, drawn.clamp(max=logits.shape[-1] - 1), greedy)


def _stops(stop) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


def _hit_stop(tokenizer, tokens: list[int], stop) -> bool:
    stops = _stops(stop)
    return bool(stops) and any(s in tokenizer.decode(tokens[-16:]) for s in stops)


def create_app(dtype: str = "bfloat16") -> FastAPI:
    app = FastAPI(title="whale local model server")
    engine = Engine(DTYPES[dtype])

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics():
        """The queue, as Prometheus text under the name admission reads (app/rollout/admission.py)."""
        return (
            "# TYPE whale:num_requests_waiting gauge\n"
            f"whale:num_requests_waiting {engine.waiting}\n"
            "# TYPE whale:num_requests_running gauge\n"
            f"whale:num_requests_running {engine.decoding}\n"
        )

    @app.get("/v1/models")
    def models():
        """The folders loaded now, as OpenAI lists models (any other folder loads on request)."""
        loaded = list(engine.models)
        return {"object": "list", "data": [{"id": m, "object": "model"} for m in loaded]}

    @app.post("/v1/chat/completions")
    async def chat(request: ChatRequest):
        try:
            result = await asyncio.wrap_future(engine.submit(request))
        except OSError as exc:
            raise HTTPException(404, f"cannot load model {request.model!r}: {exc}") from exc
        message = {"role": "assistant", "content": result["content"]}
        finish_reason = result["finish_reason"]
        if request.tools:
            content, calls = parse_tool_calls(result["content"], request.tools)
            if calls:
                message = {"role": "assistant", "content": content, "tool_calls": calls}
                finish_reason = "tool_calls"
        response = {
            "id": f"chatcmpl-{secrets.token_hex(8)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish_reason,
                    "message": message,
                }
            ],
            "usage": {
                "prompt_tokens": result["prompt_tokens"],
                "completion_tokens": result["completion_tokens"],
                "total_tokens": result["prompt_tokens"] + result["completion_tokens"],
            },
        }
        if request.return_token_ids:  # where vLLM puts them
            response["prompt_token_ids"] = result["prompt_token_ids"]
            response["choices"][0]["token_ids"] = result["token_ids"]
        return response

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="OpenAI-compatible local model server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    args = parser.parse_args()
    uvicorn.run(create_app(args.dtype), host=args.host, port=args.port, log_level="warning")
