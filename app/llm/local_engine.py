"""Continuous batching for the local model server (app/llm/local_server.py).

One thread owns the models and decodes. Each decoding step feeds the running requests one token
each, through the model together; a request that arrives joins at the next step, and one that
ends leaves at once and is answered then, not when its batch-mates end.

- The running requests' KV caches share one buffer per layer (requests x heads x columns x
  dim), each request right-padded from column 0, grown by doubling; a request that leaves is
  replaced by the last one (one request's cache copied). A step writes one column per request
  in place and attends with one set of masked batched matrix products per layer and width (`_StepCache`), the rest of
  the model (projections, MLP, the head) over the batch at once. A request's width depends on
  its own length only, so a seeded request samples the same completion whatever joins it
  (tests/llm/test_batching.py): see `_StepCache` for why.
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
import time
from collections import Counter, OrderedDict, deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

import torch
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
WIDTH_STEP = 64  # a decoding step attends each request at a multiple of this many columns


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
    pending: int = 0  # the token it feeds at the next step
    out: list[int] = field(default_factory=list)
    eos: int | None = None  # the end-of-sequence token it ended on, if it did
    finish: str = "length"


class _BatchKV:
    """The running requests' KV caches in one buffer per layer (slots x heads x columns x dim):
    request i fills slot i from column 0 on (right padding), its first `lengths[i]` columns.
    Both sizes grow by doubling; a request that leaves is replaced by the last one (one slot
    copied), so the running requests are always the first `len(lengths)` slots and a step's
    attention is one masked SDPA call per layer over views of the buffer."""

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.lengths: list[int] = []

    def __len__(self) -> int:
        return len(self.lengths)

    def add(self, prefill: _Prefill) -> None:
        """A joining request's prompt cache, into the next slot."""
        slot, length = len(self.lengths), prefill.keys[0].shape[-2]
        self._reserve(slot + 1, length + 1)
        for buffers, filled in ((self.keys, prefill.keys), (self.values, prefill.values)):
            for buffer, layer in zip(buffers, filled):
                buffer[slot, :, :length] = layer[0]
        self.lengths.append(length)

    def remove(self, slot: int) -> None:
        """Drop a request's cache: the last slot moves into its place, as in `list` order after
        `rows[slot] = rows.pop()`."""
        last = len(self.lengths) - 1
        if slot != last:
            width = self.lengths[last]
            for buffer in self.keys + self.values:
                buffer[slot, :, :width] = buffer[last, :, :width]
            self.lengths[slot] = self.lengths[last]
        self.lengths.pop()

    def _reserve(self, slots: int, columns: int) -> None:
        if not self.keys:  # no prefill seen yet: allocated by the first `add`'s caller
            return
        have_slots, have_columns = self.keys[0].shape[0], self.keys[0].shape[2]
        if slots <= have_slots and columns <= have_columns:
            return
        slots, columns = _doubled(have_slots, slots), _doubled(have_columns, columns)
        used, width = len(self.lengths), max(self.lengths, default=0)
        for buffers in (self.keys, self.values):
            for i, old in enumerate(buffers):
                grown = old.new_zeros((slots, old.shape[1], columns, old.shape[3]))
                grown[:used, :, :width] = old[:used, :, :width]
                buffers[i] = grown

    def allocate_like(self, prefill: _Prefill) -> None:
        """The first buffers, shaped after a prompt's cache (a few slots, 256 columns)."""
        if not self.keys:
            self.keys = [_empty(k) for k in prefill.keys]
            self.values = [_empty(v) for v in prefill.values]


def _doubled(have: int, need: int) -> int:
    while have < need:
        have *= 2
    return have


def _empty(layer: torch.Tensor) -> torch.Tensor:
    return layer.new_zeros((4, layer.shape[1], 256, layer.shape[3]))


@dataclass
class _Padded:
    """A step's keys, right-padded, in groups of requests attended at one width: per group,
    its slots (None: all), keys (group x heads x width x dim) and filled columns' mask."""

    groups: list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]]
    requests: int


class _StepCache:
    """The batch's cache as one decoding step's forward sees a cache: each request's new column
    goes to its slot, and attention gets the padded keys with their masks.

    Bits: masked attention over a wider buffer does not give the same bits as over the filled
    columns only (its sums run in another order: checked with SDPA, bfloat16 and float32), but
    at one width it gives a row the same bits whatever the other rows and their masks. So a
    request is attended at a width set by its own length alone (the next multiple of
    `WIDTH_STEP`), one attention call per width present. A lone request runs as two rows, itself and
    an echo that writes nothing: a matrix product over one row takes another kernel (a
    matrix-vector one) whose bfloat16 sums differ from the batched kernel's in the last bit,
    which is enough to change a sampled completion; from two rows on, each row gets the same
    bits whatever the others."""

    def __init__(self, kv: _BatchKV):
        self.kv = kv
        n = len(kv)
        self.slots = torch.arange(n)
        self.columns = torch.tensor(kv.lengths)  # where this step's column goes
        widths = [-(-(length + 1) // WIDTH_STEP) * WIDTH_STEP for length in kv.lengths]
        kv._reserve(n, max(widths))
        self.groups = []
        for width in sorted(set(widths)):
            slots = [i for i, w in enumerate(widths) if w == width]
            index = None if len(slots) == n else torch.tensor(slots)
            filled = self.columns if index is None else self.columns[index]
            mask = (torch.arange(width) <= filled[:, None])[:, None, None, :]
            self.groups.append((index, width, mask))

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are passed explicitly, per request

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args, **kwargs):
        n, kv = len(self.slots), self.kv
        kv.keys[layer_idx][self.slots, :, self.columns] = keys[:n, :, 0]
        kv.values[layer_idx][self.slots, :, self.columns] = values[:n, :, 0]
        if layer_idx == len(kv.keys) - 1:
            kv.lengths = [length + 1 for length in kv.lengths]
        groups = []
        for index, width, mask in self.groups:
            k, v = kv.keys[layer_idx][:n, :, :width], kv.values[layer_idx][:n, :, :width]
            if index is not None:
                k, v = k.index_select(0, index), v.index_select(0, index)
            groups.append((index, k, v, mask))
        return _Padded(groups, n), None


def batch_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
    """Attention for a decoding step: one masked attention call per width over the padded batch
    cache (one query per request); a prompt's prefill (one request, no padding) is plain
    causal SDPA."""
    if not isinstance(key, _Padded):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kw
        )
    out = torch.empty_like(query)
    for index, k, v, mask in key.groups:
        q = query[: k.shape[0]] if index is None else query.index_select(0, index)
        o = _masked_attention(q, k, v, mask, scaling)
        if index is None:
            out[: k.shape[0]] = o
        else:
            out[index] = o
    out[key.requests :] = out[:1]  # the lone row's echo, if any
    return out.transpose(1, 2).contiguous(), None


def _masked_attention(query, keys, values, mask, scale):
    """One query per request over its padded keys: batched matrix products per key head (its
    query heads stacked), softmax in float32; plain ops are quicker here than SDPA's CPU
    kernel, which took a millisecond a layer at 16 requests."""
    b, heads, _, dim = query.shape
    kv_heads = keys.shape[1]
    q = query.reshape(b, kv_heads, heads // kv_heads, dim)
    # in float32 throughout, as SDPA's CPU kernel accumulates: bfloat16 scores changed greedy
    # completions against transformers' generate
    scores = torch.matmul(q.float(), keys.float().transpose(-1, -2)) * scale
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.matmul(weights, values.float()).to(query.dtype).reshape(b, heads, 1, dim)


AttentionInterface.register("whale_batch", batch_attention)


class Engine:
    """One thread owns the models and decodes the running batch, a step at a time."""

    def __init__(self, dtype: torch.dtype, load_weights):
        self.dtype = dtype
        self.load_weights = load_weights
        self.models: OrderedDict[str, tuple] = OrderedDict()
        self.prefixes: OrderedDict[tuple, _Prefill] = OrderedDict()
        self.jobs: queue.Queue[Job] = queue.Queue()
        self.rows: list[_Row] = []
        self.kv = _BatchKV()  # the running rows' caches, row i in slot i
        self.model_name: str | None = None
        self.submitted = self.answered = 0  # for /metrics
        # also for /metrics: what the decoding thread did, in tokens, loads and seconds of its
        # wall time (its CPU time would miss torch's other threads)
        self.work: Counter[str] = Counter()
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
            started = time.perf_counter()
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = self.load_weights(path, self.dtype).eval()
            model.set_attn_implementation("whale_batch")
            eos = {tokenizer.eos_token_id, *_ids(model.generation_config.eos_token_id)}
            self.models[path] = (model, tokenizer, eos - {None})
            self.work["model_loads"] += 1
            self.work["model_load_seconds"] += time.perf_counter() - started
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
                    self.kv = _BatchKV()

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
                if not self.rows:  # a new batch, maybe of another model: new buffers
                    self.kv = _BatchKV()
                self.kv.allocate_like(prefill)
                self.kv.add(prefill)
                row.pending = token
                self.rows.append(row)

    def _prefill(self, model, ids: list[int]) -> _Prefill:
        key = (self.model_name, tuple(ids))
        if key in self.prefixes:
            self.prefixes.move_to_end(key)
            return self.prefixes[key]
        started = time.perf_counter()
        output = model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)
        self.work["prompt_tokens"] += len(ids)
        self.work["prefill_seconds"] += time.perf_counter() - started
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
        self._leave([i for i, r in enumerate(self.rows) if r.job.future.cancelled()])
        rows = self.rows
        if not rows:
            return
        started = time.perf_counter()
        model, tokenizer, eos = self.models[self.model_name]
        fed = rows * 2 if len(rows) == 1 else rows  # see _StepCache: a lone row runs twice
        positions = self.kv.lengths * 2 if len(rows) == 1 else self.kv.lengths
        output = model(
            input_ids=torch.tensor([[r.pending] for r in fed]),
            position_ids=torch.tensor(positions)[:, None],
            cache=_StepCache(self.kv),
            use_cache=True,
        )
        chosen = _sample_rows(output.logits[: len(rows), -1, :].float(), rows)
        ended = []
        for i, (row, token) in enumerate(zip(rows, chosen)):
            if _record(row, token, tokenizer, eos):
                _answer(row, tokenizer)
                ended.append(i)
            else:
                row.pending = token
        self.work["generation_tokens"] += len(chosen)
        self._leave(ended)
        self.work["decode_seconds"] += time.perf_counter() - started

    def _leave(self, slots: list[int]) -> None:
        """Drop these rows and their caches (highest slot first, so each move is still valid)."""
        for slot in sorted(slots, reverse=True):
            self.kv.remove(slot)
            last = self.rows.pop()
            if slot < len(self.rows):
                self.rows[slot] = last


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
