"""Continuous batching for the local model server (app/llm/local_server.py).

One thread owns the models and decodes. Each decoding step feeds the running requests one token
each, through the model together; a request that arrives joins at the next step, and one that
ends leaves at once and is answered then, not when its batch-mates end.

- The KV cache is kept per request, in a buffer that grows by doubling, so a step writes one
  column per request in place and a request joins or leaves without copying anyone's cache.
  Attention runs request by request over its own cache (`rows_attention`), the rest of the model
  (projections, MLP, the head) over the batch at once. The price: at 16 requests at once (one
  thread, prompts of about 40 tokens) the per-request attention took a quarter of a step's
  time, the matrix products under half (cProfile). No padding: a request's
  attention is the same arithmetic alone or in any batch, and the matrix products give each row
  the same bits whatever the other rows (checked for bfloat16 and float32 on this CPU), so a
  seeded request samples the same completion whatever joins it (tests/llm/test_batching.py).
- A prompt is prefilled alone: no padding, so its cache does not depend on what else arrived.
  Its cache and last logits are kept in a small store keyed by its token ids, so the k samples
  of one prompt prefill it once (`PREFIX_TOKENS`).
- Sampling: every request draws from its own torch.Generator, seeded by its `seed`, one number
  per token.
"""

import os
import queue
import secrets
import threading
from collections import OrderedDict, deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AutoTokenizer
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from app.llm.cpu_share import ThreadShare
from app.llm.tool_calls import template_messages

MAX_BATCH = int(os.environ.get("WHALE_LOCAL_MAX_BATCH", "32"))  # requests decoded together
MAX_MODELS = 3
# Prompt caches kept for reuse, in tokens over all prompts: at 23 kB a token (SmolLM2 in
# bfloat16), about 100 MB.
PREFIX_TOKENS = 4096


@dataclass
class Job:
    request: Any  # app.llm.local_server.ChatRequest
    future: Future = field(default_factory=Future)


@dataclass
class _Prefill:
    """A prompt's KV cache (per layer, 1 x heads x tokens x dim) and its last position's logits."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    logits: torch.Tensor


@dataclass
class _Row:
    """One running request: what it was asked, what it sampled so far."""

    job: Job
    prompt_ids: list[int]
    generator: torch.Generator
    stops: list[str]
    kv: "_KV | None" = None
    pending: int = 0  # the token it feeds at the next step
    out: list[int] = field(default_factory=list)
    eos: int | None = None  # the end-of-sequence token it ended on, if it did
    finish: str = "length"


class _KV:
    """One request's KV cache: per layer, a buffer (1 x heads x capacity x dim) of which the
    first `length` columns are filled."""

    def __init__(self, prefill: _Prefill):
        self.length = prefill.keys[0].shape[-2]
        self.keys = [self._buffer(k, self.length + 64) for k in prefill.keys]
        self.values = [self._buffer(v, self.length + 64) for v in prefill.values]

    @staticmethod
    def _buffer(filled: torch.Tensor, capacity: int) -> torch.Tensor:
        buffer = filled.new_zeros((*filled.shape[:2], capacity, filled.shape[3]))
        buffer[:, :, : filled.shape[2]] = filled
        return buffer

    def append(self, layer: int, key: torch.Tensor, value: torch.Tensor):
        """Write this step's column for `layer`; the filled views, with it."""
        end = self.length + 1
        if end > self.keys[layer].shape[2]:
            grown = 2 * self.keys[layer].shape[2]
            self.keys[layer] = self._buffer(self.keys[layer][:, :, : self.length], grown)
            self.values[layer] = self._buffer(self.values[layer][:, :, : self.length], grown)
        self.keys[layer][:, :, self.length] = key[:, :, 0]
        self.values[layer][:, :, self.length] = value[:, :, 0]
        if layer == len(self.keys) - 1:
            self.length = end
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


class _PerRequest(list):
    """Per-request tensors where the model expects a batched one (keys or values)."""


class _RowsCache:
    """The running requests' own caches, as one decoding step's forward sees a cache: each
    request's new column goes to its own, and attention gets them one by one. A lone request
    runs as two rows, itself and an echo that writes nothing: a matrix product over one row
    takes another kernel (a matrix-vector one) whose bfloat16 sums differ from the batched
    kernel's in the last bit, which is enough to change a sampled completion; from two rows on,
    each row gets the same bits whatever the others."""

    def __init__(self, caches: list[_KV]):
        self.caches = caches
        self.echo = len(caches) == 1

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are passed explicitly, per request

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args, **kwargs):
        filled = [
            c.append(layer_idx, keys[i : i + 1], values[i : i + 1])
            for i, c in enumerate(self.caches)
        ]
        filled += filled if self.echo else []
        return _PerRequest(k for k, _ in filled), _PerRequest(v for _, v in filled)


def rows_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention for a decoding step over per-request caches (one query each); a prompt's
    prefill (one request, no padding) is plain causal SDPA."""
    if not isinstance(key, _PerRequest):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    out = torch.cat(
        [
            F.scaled_dot_product_attention(query[i : i + 1], k, v, scale=scaling, enable_gqa=True)
            for i, (k, v) in enumerate(zip(key, value))
        ]
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register("whale_rows", rows_attention)


class Engine:
    """One thread owns the models and decodes the running batch, a step at a time."""

    def __init__(self, dtype: torch.dtype, load_weights):
        self.dtype = dtype
        self.load_weights = load_weights
        self.models: OrderedDict[str, tuple] = OrderedDict()
        self.prefixes: OrderedDict[tuple, _Prefill] = OrderedDict()
        self.jobs: queue.Queue[Job] = queue.Queue()
        self.rows: list[_Row] = []
        self.model_name: str | None = None
        self.submitted = self.answered = 0  # for /metrics
        threading.Thread(target=self._loop, daemon=True, name="decode").start()

    def submit(self, request) -> Future:
        job = Job(request)
        self.submitted += 1
        job.future.add_done_callback(self._answered)
        self.jobs.put(job)
        return job.future

    def _answered(self, _future: Future) -> None:
        self.answered += 1

    @property
    def running(self) -> int:
        return len(self.rows)

    @property
    def waiting(self) -> int:
        """Requests that cannot join at the next step, the batch being full: vLLM's meaning."""
        return max(0, self.submitted - self.answered - MAX_BATCH)

    def _load(self, path: str):
        if path not in self.models:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = self.load_weights(path, self.dtype).eval()
            model.set_attn_implementation("whale_rows")
            eos = {tokenizer.eos_token_id, *_ids(model.generation_config.eos_token_id)}
            self.models[path] = (model, tokenizer, eos - {None})
            while len(self.models) > MAX_MODELS:
                self.models.popitem(last=False)
        self.models.move_to_end(path)
        return self.models[path]

    def _loop(self) -> None:
        threads = ThreadShare()  # here: OpenMP keeps the thread count per calling thread
        waiting: deque[Job] = deque()
        with torch.inference_mode():
            while True:
                if not self.rows and not waiting:
                    waiting.append(self.jobs.get())
                while True:
                    try:
                        waiting.append(self.jobs.get_nowait())
                    except queue.Empty:
                        break
                threads.adjust()
                try:
                    self._admit(waiting)
                    if self.rows:
                        self._step()
                except Exception as exc:  # noqa: BLE001 - reported to each running request
                    for row in self.rows:
                        _settle(row.job.future, error=exc)
                    self.rows: list[_Row] = []

    def _admit(self, waiting: deque[Job]) -> None:
        """Prefill the waiting requests that fit the batch, in order of arrival, while they ask
        for the running batch's model (a request for another waits for the batch to empty)."""
        if not self.rows and waiting:
            self.model_name = waiting[0].request.model
        joining = []
        while (
            waiting
            and len(self.rows) + len(joining) < MAX_BATCH
            and waiting[0].request.model == self.model_name
        ):
            job = waiting.popleft()
            if not job.future.cancelled():  # its caller went away while it waited
                joining.append(job)
        if not joining:
            return
        try:
            model, tokenizer, eos = self._load(self.model_name)
        except Exception as exc:  # noqa: BLE001 - reported to each request that asked for it
            for job in joining:
                _settle(job.future, error=exc)
            return
        rows, prefills = [], []
        for job in joining:
            try:
                ids = _prompt_ids(tokenizer, job.request)
                prefills.append(self._prefill(model, ids))
            except Exception as exc:  # noqa: BLE001 - this request's own failure
                _settle(job.future, error=exc)
                continue
            rows.append(_new_row(job, ids))
        if not rows:
            return
        first = _sample_rows(torch.stack([p.logits for p in prefills]), rows)
        for row, prefill, token in zip(rows, prefills, first):
            if _record(row, token, tokenizer, eos):
                _answer(row, tokenizer)  # ended on its first token
            else:
                row.kv, row.pending = _KV(prefill), token
                self.rows.append(row)

    def _prefill(self, model, ids: list[int]) -> _Prefill:
        key = (self.model_name, tuple(ids))
        if key in self.prefixes:
            self.prefixes.move_to_end(key)
            return self.prefixes[key]
        output = model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)
        layers = output.cache.layers
        if not all(type(layer) is DynamicLayer for layer in layers):
            raise ValueError("the local server decodes models whose layers all attend in full")
        prefill = _Prefill(
            [layer.keys for layer in layers],
            [layer.values for layer in layers],
            output.logits[0, -1].float(),
        )
        self.prefixes[key] = prefill
        while sum(len(k[1]) for k in self.prefixes) > PREFIX_TOKENS and len(self.prefixes) > 1:
            self.prefixes.popitem(last=False)
        return prefill

    def _step(self) -> None:
        """Feed each running request its pending token; sample the next; answer who ended."""
        # a request whose caller went away (its future cancelled) leaves without an answer
        rows = self.rows = [r for r in self.rows if not r.job.future.cancelled()]
        if not rows:
            return
        model, tokenizer, eos = self.models[self.model_name]
        fed = rows * 2 if len(rows) == 1 else rows  # see _RowsCache: a lone row runs twice
        output = model(
            input_ids=torch.tensor([[r.pending] for r in fed]),
            position_ids=torch.tensor([[r.kv.length] for r in fed]),
            cache=_RowsCache([r.kv for r in rows]),
            use_cache=True,
        )
        chosen = _sample_rows(output.logits[: len(rows), -1, :].float(), rows)
        self.rows = []
        for row, token in zip(rows, chosen):
            if _record(row, token, tokenizer, eos):
                _answer(row, tokenizer)
            else:
                row.pending = token
                self.rows.append(row)


def _ids(value) -> list[int]:
    return [] if value is None else [value] if isinstance(value, int) else list(value)


def _prompt_ids(tokenizer, request) -> list[int]:
    prompt = tokenizer.apply_chat_template(
        template_messages(request.messages),
        tools=request.tools or None,
        add_generation_prompt=True,
        tokenize=False,
        **(request.chat_template_kwargs or {}),
    )
    return tokenizer(prompt, add_special_tokens=False)["input_ids"]


def _new_row(job: Job, ids: list[int]) -> _Row:
    seed = job.request.seed
    return _Row(
        job=job,
        prompt_ids=ids,
        generator=torch.Generator().manual_seed(
            seed if seed is not None else secrets.randbelow(2**31)
        ),
        stops=stops_of(job.request.stop),
    )


def _sample_rows(logits: torch.Tensor, rows: list[_Row]) -> list[int]:
    return sample(
        logits,
        torch.tensor([r.job.request.temperature for r in rows]),
        torch.tensor([r.job.request.top_p for r in rows]),
        [r.generator for r in rows],
    ).tolist()


def _record(row: _Row, token: int, tokenizer, eos: set[int]) -> bool:
    """Take a sampled token into the row; whether the row has ended (EOS, a stop string, its
    max_tokens)."""
    if token in eos:
        row.eos, row.finish = token, "stop"
        return True
    row.out.append(token)
    if row.stops and any(s in tokenizer.decode(row.out[-16:]) for s in row.stops):
        row.finish = "stop"
        return True
    return len(row.out) >= row.job.request.max_tokens


def _answer(row: _Row, tokenizer) -> None:
    text = tokenizer.decode(row.out, skip_special_tokens=True)
    for s in row.stops:
        text = text.split(s)[0]
    _settle(
        row.job.future,
        {
            "content": text,
            "finish_reason": row.finish,
            "prompt_tokens": len(row.prompt_ids),
            "completion_tokens": len(row.out),
            "prompt_token_ids": row.prompt_ids,
            # what was sampled, the end-of-sequence token included where it ended on one
            "token_ids": row.out + ([row.eos] if row.eos is not None else []),
        },
    )


def _settle(future: Future, result=None, error: Exception | None = None) -> None:
    """Answer a request, unless its caller cancelled it meanwhile (then nobody is listening)."""
    try:
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    except InvalidStateError:
        pass


def sample(
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


def stops_of(stop) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])
