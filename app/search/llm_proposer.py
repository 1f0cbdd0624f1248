"""The `llm` proposer: one chat model (any OpenAI-compatible endpoint) writes K candidates.

It is shown the accepted harness, the frontier, the earlier candidates of the phase, and a few
failing and passing traces of the accepted harness flattened to text; it replies with K
candidates in a fixed markdown shape, which `parse_candidates` reads leniently.
"""

import contextlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlmodel import or_, select

from app.db.schema import Checkpoint, Harness
from app.domains import skill_of
from app.experiment_schema import LLMProposerConfig
from app.llm.client import BackendError, ChatEndpoint
from app.search import traces
from app.search.candidate import Candidate, Proposal
from app.search.context import SearchContext
from app.search.rules import CONTRACT, RULES

FORMAT = """\
Reply with exactly {k} candidates, each in this shape:

### Candidate: <short-name>
Hypothesis: <what you expect to improve and why, from the traces>
Axis: <the part of the harness it touches>
Changes: <what changed>
```python
<the complete harness file>
```"""

_HEADER = re.compile(r"^#{1,4}\s*candidate\b[^\n]*$", re.IGNORECASE | re.MULTILINE)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_FIELD = re.compile(
    r"^\W*(hypothesis|axis|changes|what changed|name)\W*:[\s*_]*(.+)$", re.IGNORECASE | re.MULTILINE
)


def parse_candidates(text: str, parent_id: int) -> list[Candidate]:
    """Candidates from a reply. Sections start at "### Candidate" headers; without headers,
    every fenced code block is a candidate. A section without code yields an invalid candidate
    so the failure is visible in the archive."""
    starts = [m.start() for m in _HEADER.finditer(text)]
    sections = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])] if starts else None
    if sections is None:
        blocks = _FENCE.findall(text)
        sections = [f"```python\n{code}```" for _, code in blocks] or [text]
    return [_candidate(section, i, parent_id) for i, section in enumerate(sections, 1)]


def _candidate(section: str, index: int, parent_id: int) -> Candidate:
    fields = {k.lower(): v.strip() for k, v in _FIELD.findall(section)}
    header = _HEADER.match(section.lstrip())
    name = fields.get("name") or (
        header.group(0).split(":", 1)[-1].strip(" #*`") if header and ":" in header.group(0) else ""
    )
    name = re.sub(r"[^\w.-]+", "-", name).strip("-")[:60] or f"candidate-{index}"
    blocks = [
        code for lang, code in _FENCE.findall(section) if lang.lower() in ("", "python", "py")
    ]
    code = max(blocks, key=lambda c: ("def run" in c, len(c)), default=None)
    return Candidate(
        name=name,
        code=code,
        hypothesis=fields.get("hypothesis", ""),
        axis=fields.get("axis", ""),
        changes=fields.get("changes") or fields.get("what changed", ""),
        parent_ids=[parent_id],
        error=None if code else "no code block in the reply",
    )


@dataclass
class Reply:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None  # None: no prices configured


async def ask(cfg: LLMProposerConfig, ctx: SearchContext, messages: list[dict]) -> Reply:
    """One chat call for a proposer: the configured endpoint, or the run's own model server
    under its current checkpoint; priced when [search.llm] gives prices."""
    if cfg.url:
        key = os.environ.get(cfg.api_key_env, "none")
        endpoint, model, owned = ChatEndpoint(cfg.url, cfg.model or "", key), cfg.model or "", True
    else:
        endpoint, model, owned = ctx.workbench.endpoint, cfg.model or _served_name(ctx), False
    # on the run's own server, a slot like a rollout's: none is given while it sleeps (colocated)
    admission = None if owned else getattr(ctx.workbench, "admission", None)
    try:
        async with admission.slot() if admission else contextlib.nullcontext():
            reply = await endpoint.chat(
                model, messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens
            )
    except BackendError as exc:
        raise RuntimeError(f"the proposer endpoint {endpoint.base_url} failed: {exc}") from None
    finally:
        if owned:
            await endpoint.close()
    text = ((reply.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
    usage = reply.get("usage") or {}
    p, c = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    cost = None
    if cfg.price_in_per_mtok is not None or cfg.price_out_per_mtok is not None:
        cost = (p * (cfg.price_in_per_mtok or 0) + c * (cfg.price_out_per_mtok or 0)) / 1e6
    return Reply(text, model, p, c, cost)


# how vLLM and OpenAI word a prompt longer than the model's context (an HTTP 400)
CONTEXT_FULL = ("maximum context length", "context_length_exceeded")


async def ask_fitting(
    cfg: LLMProposerConfig,
    ctx: SearchContext,
    messages_with: Callable[[Sequence], list[dict]],
    shown: Sequence,
) -> tuple[Reply, int]:
    """Ask with the traces `shown` in the prompt; a prompt the endpoint refuses as longer than
    its model's context is asked again with half the traces, down to none (a small proposer
    model, or long traces, would otherwise fail every reflection): the reply and how many
    traces it saw."""
    while True:
        try:
            return await ask(cfg, ctx, messages_with(shown)), len(shown)
        except RuntimeError as exc:
            if not shown or not any(words in str(exc) for words in CONTEXT_FULL):
                raise
            shown = shown[: len(shown) // 2]


class LLMProposer:
    name = "llm"

    def __init__(self, cfg: LLMProposerConfig):
        self.cfg = cfg

    async def propose(self, ctx: SearchContext) -> Proposal:
        system = {
            "role": "system",
            "content": "You improve agent harnesses by reading their "
            f"traces.\n\n{CONTRACT}\n\n{skill_of(ctx.domain)}\n\nRules:\n{RULES}",
        }
        with ctx.workbench.session() as s:
            harnesses = list(s.exec(_phase_harnesses(ctx)))
            shown = list(
                traces.examples(
                    s, ctx.accepted.id, ctx.checkpoint_id, self.cfg.failures, self.cfg.successes
                )
            )
        reply, seen = await ask_fitting(
            self.cfg,
            ctx,
            lambda rs: [system, {"role": "user", "content": self.prompt(ctx, harnesses, rs)}],
            shown,
        )
        return Proposal(
            parse_candidates(reply.text, ctx.accepted.id),
            reply.prompt_tokens,
            reply.completion_tokens,
            reply.cost_usd,
            report=f"{reply.model}: {len(reply.text)} characters, {seen} of "
            f"{len(shown)} traces shown",
        )

    def prompt(self, ctx: SearchContext, harnesses: list[Harness], shown: Sequence) -> str:
        rows = []
        for h in harnesses:
            score = ctx.scores.get(h.id)
            result = (
                f"success {score.success:.3f}, turns {score.turns:.2f}"
                if score
                else ("invalid: " + (h.error or "")[:200] if not h.valid else "not scored")
            )
            rows.append(
                f"- #{h.id} {h.name} (iteration {h.iteration or 0}): {result}. {h.hypothesis or ''}"
            )
        front = ", ".join(
            f"#{p.harness_id} ({p.success:.3f}, {p.turns:.2f} turns)" for p in ctx.frontier
        )
        tools = ", ".join([*ctx.domain.tools, *getattr(ctx.domain, "sandbox_tools", {})]) or "none"
        parts = [
            f"Domain: {ctx.domain.name}. Tools: {tools}. Forbidden modules: "
            f"{', '.join(sorted(ctx.domain.forbidden_modules))}.",
            f"## Accepted harness #{ctx.accepted.id} ({ctx.accepted.name})\n```python\n"
            f"{ctx.accepted.code}\n```",
            f"## Frontier (success rate up, mean turns down)\n{front or 'empty'}",
            "## Candidates so far in this phase\n" + "\n".join(rows),
            "## Traces of the accepted harness\n" + "\n\n".join(traces.flatten(r) for r in shown),
            FORMAT.format(k=ctx.k),
        ]
        return "\n\n".join(parts)


def _phase_harnesses(ctx: SearchContext):
    return (
        select(Harness)
        .where(or_(Harness.phase_id == ctx.phase_id, Harness.id == ctx.incoming.id))
        .order_by(Harness.id)
    )


def _served_name(ctx: SearchContext) -> str:
    with ctx.workbench.session() as s:
        return s.get(Checkpoint, ctx.checkpoint_id).name
