"""The local model server: transformers behind the OpenAI chat-completions protocol.

    python -m app.llm.local_server --port PORT

A thin layer, written because `transformers serve` does not hold up for rollouts: with
continuous batching every request shares the first request's sampling settings, a request's
seed is not its own, and temperature alone never turns sampling on. Here each request keeps its
own temperature, top_p, max_tokens, stop strings and seed (a torch.Generator per request), and
requests are decoded together by continuous batching: one joins the running batch at the next
decoding step and leaves it when it ends (app/llm/local_engine.py).

With `"return_token_ids": true` a reply carries the prompt's token ids (`prompt_token_ids`) and
its choice the sampled ones (`token_ids`), as vLLM names them.

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
import secrets
import time
from pathlib import Path

import torch
import uvicorn
from fastapi import FastAPI, HTTPException
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from transformers import AutoModelForCausalLM

from app.llm.local_engine import Engine
from app.llm.tool_calls import parse_tool_calls

# Decoding a small model on a CPU reads every weight once per token: bfloat16 halves what is read
# (1.3-1.8x the tokens per second on a CPU with bf16 instructions); float32 is the exact one.
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
# The engine's work counters /metrics reports (Engine.work), each as whale:<name>_total.
WORK = (
    "prompt_tokens",
    "generation_tokens",
    "model_loads",
    "prefill_seconds",
    "decode_seconds",
    "model_load_seconds",
)


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
    max_tokens: int = Field(default=256, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    tools: list[dict] | None = None
    chat_template_kwargs: dict | None = None
    return_token_ids: bool = False


def create_app(dtype: str = "bfloat16") -> FastAPI:
    app = FastAPI(title="whale local model server")
    engine = Engine(DTYPES[dtype], load_weights)

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics():
        """The queue, as Prometheus text under the name admission reads (app/rollout/admission.py),
        and the work done so far: tokens prefilled and generated, models loaded, and the
        decoding thread's seconds in each (how a shared server's time splits, e.g. in the test
        suite's timeline)."""
        gauges = {"num_requests_waiting": engine.waiting, "num_requests_running": engine.running}
        lines = [
            f"# TYPE whale:{name} gauge\nwhale:{name} {value}" for name, value in gauges.items()
        ]
        lines += [
            f"# TYPE whale:{name}_total counter\nwhale:{name}_total {engine.work[name]:g}"
            for name in WORK
        ]
        return "\n".join(lines) + "\n"

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
        choice = {"index": 0, "finish_reason": finish_reason, "message": message}
        reply = {
            "id": f"chatcmpl-{secrets.token_hex(8)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": result["prompt_tokens"],
                "completion_tokens": result["completion_tokens"],
                "total_tokens": result["prompt_tokens"] + result["completion_tokens"],
            },
        }
        if request.return_token_ids:
            reply["prompt_token_ids"] = result["prompt_token_ids"]
            choice["token_ids"] = result["token_ids"]
        return reply

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="OpenAI-compatible local model server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    args = parser.parse_args()
    uvicorn.run(create_app(args.dtype), host=args.host, port=args.port, log_level="warning")
