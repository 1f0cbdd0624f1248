"""Generation settings: what reaches the model on every call of a rollout, declared by the
experiment (or `whale eval`) and recorded, never dropped in silence.

The sections themselves are in app/experiment_schema.py.
- `[sampling]`: defaults the gateway fills in where the harness's call does not set a field
  (temperature, top_p, top_k, min_p, max_tokens, chat_template_kwargs, ...).
- `[rollout]`: the budgets of one rollout (model calls, tokens, completion tokens as the
  release counts them, the per-call completion cap, the wall-clock limit).
- `[rft] temperature`: RFT samples at it whatever the harness sets, since a harness that
  hard-codes temperature 0 would turn n samples of a prompt into one sample n times.
- `[sampling] override_harness = true`: the decoding fields of [sampling] and its
  `chat_template_kwargs` (thinking on or off; unset: the template's default) are sent on every
  call of every split whatever the harness sets (the paper's fixed decoding).

A field the backend does not take is refused with its name and the backend's, when the
experiment is started and again when a harness sends it.
"""

from dataclasses import dataclass, field
from typing import Any

from app.config import Settings
from app.experiment_schema import RolloutLimits, Sampling

# What a harness's call may carry besides its messages, and which backend takes which. The
# embedded local server implements the first five, `tools` and `chat_template_kwargs`
# (app/llm/local_server.py); vLLM and OpenAI-compatible endpoints take them all (vLLM's extra
# sampling parameters included).
CALL_FIELDS = (
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "stop",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "n",
    "logprobs",
    "top_logprobs",
    "response_format",
    "chat_template_kwargs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
)
BACKEND_FIELDS = {
    "local": frozenset(CALL_FIELDS[:5]) | {"tools", "chat_template_kwargs"},
    "vllm": frozenset(CALL_FIELDS),
    "endpoint": frozenset(CALL_FIELDS),  # WHALE_LLM_URL: the server itself refuses what it lacks
}


def _setting(name: str):
    """The default of a rollout budget: the WHALE_ROLLOUT_* setting's (app/config.py)."""
    return Settings.model_fields[f"rollout_{name}"].default


@dataclass(frozen=True)
class Generation:
    """What the gateway applies to one rollout's calls; stored with each evaluation."""

    backend: str
    defaults: dict[str, Any] = field(default_factory=dict)
    forced: dict[str, Any] = field(default_factory=dict)  # over the harness's own values
    max_calls: int = _setting("max_calls")
    max_tokens: int = _setting("max_tokens")
    max_completion_tokens: int | None = None
    max_tokens_per_call: int = _setting("max_tokens_per_call")
    wall_s: float | None = None
    infra_retries: int = _setting("infra_retries")

    def record(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, {})}

    def overridden(self, body: dict[str, Any]) -> dict[str, Any]:
        """What the harness asked for that the forced fields replaced (shown in its trace)."""
        return {
            k: v
            for k, v in body.items()
            if k in self.forced and v is not None and v != self.forced[k]
        }

    def apply(self, body: dict[str, Any], completion_left: int | None) -> dict[str, Any]:
        """The call as it goes to the server: the harness's fields over the defaults, the
        forced ones over both, max_tokens within the per-call cap and what is left of the
        rollout's completion budget."""
        given = {k: v for k, v in body.items() if v is not None}  # None: not set
        # a field forced to None is sent unset, whatever the harness set
        sent = {k: v for k, v in {**self.defaults, **given, **self.forced}.items() if v is not None}
        cap = self.max_tokens_per_call
        if completion_left is not None:
            cap = min(cap, completion_left)
        sent["max_tokens"] = min(int(sent.get("max_tokens") or cap), cap)
        return sent


def refused_fields(fields, backend: str) -> str | None:
    """Why a call (or an experiment's [sampling]) with these fields cannot go to `backend`."""
    unknown = [f for f in fields if f not in CALL_FIELDS]
    if unknown:
        return (
            f"{', '.join(unknown)}: not a parameter a model call may set "
            f"(known: {', '.join(CALL_FIELDS)})"
        )
    taken = BACKEND_FIELDS[backend]
    missing = [f for f in fields if f not in taken]
    if missing:
        return (
            f"{', '.join(missing)}: the {backend} backend does not support "
            f"{'it' if len(missing) == 1 else 'them'} (it takes {', '.join(sorted(taken))})"
        )
    return None


def declared_by(run_config: dict | None) -> dict[str, Any]:
    """What a run declared: an experiment's parsed file, or `whale eval`'s own keys."""
    config = run_config or {}
    return config.get("experiment") or config


@dataclass(frozen=True)
class Declared:
    """What a run declared of how its calls run, parsed once: its [sampling], its [rollout], its
    [rft] temperature and its verifier mode. A loop holds the one of its experiment (of_experiment,
    nothing checked again); any other run's comes from its stored config (of_config)."""

    sampling: Sampling = field(default_factory=Sampling)
    rollout: RolloutLimits = field(default_factory=RolloutLimits)
    rft_temperature: float | None = None
    scoring: str | None = None

    @classmethod
    def of_experiment(cls, experiment) -> "Declared":
        """From an experiment as parsed (app/experiment_schema.py's Experiment)."""
        return cls(
            experiment.sampling, experiment.rollout, experiment.rft.temperature, experiment.scoring
        )

    @classmethod
    def of_config(cls, run_config: dict | None) -> "Declared":
        """From a run's stored config: an experiment's, or `whale eval`'s and `whale train`'s
        own keys."""
        declared = declared_by(run_config)
        return cls(
            Sampling.model_validate(declared.get("sampling") or {}),
            RolloutLimits.model_validate(declared.get("rollout") or {}),
            (declared.get("rft") or {}).get("temperature"),
            declared.get("scoring"),
        )


def generation_for(
    declared: Declared,
    split: str,
    backend: str,
    limits: dict[str, Any],
    harness_turns: int | None = None,
) -> Generation:
    """The settings a run's evaluation of `split` runs under: the run's [sampling] and
    [rollout], the process-wide limits where those are unset, and [rft] temperature forced on
    RFT's sampling (the train split). `harness_turns`: the harness's declared MAX_TURNS, its own
    call budget within `max_calls` (the clamp)."""
    # [sampling] override_harness = true: every split, every call
    forced = declared.sampling.forced()
    if split == "train" and declared.rft_temperature is not None:
        forced["temperature"] = declared.rft_temperature
    given = {k: v for k, v in declared.rollout.model_dump().items() if v is not None}
    budget = {**limits, **given}
    if harness_turns is not None:
        budget["max_calls"] = min(harness_turns, budget.get("max_calls", harness_turns))
    return Generation(
        backend=backend, defaults=declared.sampling.defaults(), forced=forced, **budget
    )
