"""Every key of an experiment file (TOML), one pydantic model per section: a newcomer reads this
one file to learn what an experiment can say. Each model forbids unknown keys and bounds each
value, so a typo or an absurd value is refused with its key before anything runs. Parsing a
file, checking it against the machine and describing it (`whale run --dry-run`) live in
app/loop/experiment_file.py; what the settings do at run time is said where they are used.
"""

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# Upper bounds of experiment keys: a value past them is a typo or an attack (a 20-digit rollout
# budget), refused with the key and the bound rather than stored.
MAX_STEPS = 10_000  # RFT steps, search iterations, phases
MAX_SAMPLES = 1024  # samples per task (k, n, harness-split samples)
MAX_TASKS = 10_000_000  # tasks or prompts taken from a split
MAX_SEED = 2**32 - 1


def describe(exc: ValidationError) -> str:
    """A validation error as one line naming each offending key: `budget.rollouts: ...`."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors()
    )


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested settings (an experiment as stored) as dotted keys, as `describe` names them:
    `rft.lr`; a list is one value."""
    if not isinstance(value, dict):
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        flat.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def renamed(data: Any, names: dict[str, str]) -> Any:
    """A stored section with its keys of earlier names (old -> new) under their new ones: a run
    stored before a rename keeps its meaning (a file saying an old name is refused in parse())."""
    if not (isinstance(data, dict) and names.keys() & data.keys()):
        return data
    data = dict(data)
    for old, new in names.items():
        if old in data:
            data.setdefault(new, data.pop(old))
    return data


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# The fields of [sampling] that shape the distribution a token is drawn from: what
# `override_harness` holds over every call of a run, so a harness cannot change how the model
# is sampled.
DECODING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)


class Sampling(_Strict):
    """[sampling]: each field set here is sent on every call whose harness leaves it unset.
    With `override_harness = true` the decoding fields set here (DECODING_FIELDS) are sent on
    every call whatever the harness sets, for training, harness evaluation and test alike, as
    the paper samples (temperature 1.0, top_p 1.0, top_k 20): a harness at temperature 0 would
    make mean@k one greedy sample k times, and a proposer could "improve" a harness by
    decoding."""

    override_harness: bool = Field(
        default=False, description="the decoding fields set here override the harness's own"
    )

    temperature: float | None = Field(default=None, ge=0, le=10)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1, le=1_000_000, description="-1: off (vLLM)")
    min_p: float | None = Field(default=None, ge=0, le=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = Field(default=None, gt=0, le=10)
    max_tokens: int | None = Field(default=None, ge=1, le=10**7, description="per call")
    stop: list[str] | None = Field(default=None, max_length=16)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None, description="e.g. {enable_thinking = true} for Qwen3 templates"
    )

    def defaults(self) -> dict[str, Any]:
        """What a call gets where it sets nothing itself."""
        return self.model_dump(exclude_none=True, exclude={"override_harness"})

    def forced(self) -> dict[str, Any]:
        """What every call gets whatever it sets (nothing unless `override_harness`): the
        decoding fields set here, and `chat_template_kwargs` always, since thinking on or off
        changes what is sampled as much as they do (None: the chat template's own default, and
        no harness's)."""
        if not self.override_harness:
            return {}
        given = self.defaults()
        forced = {k: given[k] for k in DECODING_FIELDS if k in given}
        return {**forced, "chat_template_kwargs": self.chat_template_kwargs}

    @model_validator(mode="before")
    @classmethod
    def _earlier_name(cls, data: Any) -> Any:
        """Runs stored before the key was renamed (it was `fixed`, a word [switching]'s rule
        uses too) keep its meaning; a file that says it now is refused in parse()."""
        return renamed(data, {"fixed": "override_harness"})

    @model_validator(mode="after")
    def _fixed_decoding_needs_a_value(self):
        if self.override_harness and not any(getattr(self, k) is not None for k in DECODING_FIELDS):
            fields = ", ".join(DECODING_FIELDS)
            raise ValueError(f"override_harness = true overrides nothing: set one of {fields}")
        return self


class RolloutLimits(_Strict):
    """[rollout]: one rollout's budgets; unset ones come from the WHALE_ROLLOUT_* settings."""

    max_calls: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="model calls per rollout; a harness declaring MAX_TURNS = n gets min(n, "
        "max_calls): its own turn limit, clamped here (the release's clamp: 16, 2 x 9 in chess)",
    )
    max_tokens: int | None = Field(
        default=None, ge=1, le=10**9, description="prompt + completion tokens over the rollout"
    )
    max_completion_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10**9,
        description="completion tokens over the rollout (the release's assistant-token budget)",
    )
    max_tokens_per_call: int | None = Field(
        default=None, ge=1, le=10**7, description="completion cap of one call"
    )
    wall_s: float | None = Field(
        default=None,
        gt=0,
        le=10**6,
        description="limit on the harness's own time (waits on model and tool calls not counted)",
    )
    infra_retries: int | None = Field(
        default=None, ge=0, le=10, description="tries more after an infrastructure failure"
    )

    @model_validator(mode="after")
    def _per_call_within_the_rollout(self):
        cap = self.max_tokens_per_call
        for budget in ("max_completion_tokens", "max_tokens"):
            limit = getattr(self, budget)
            if cap is not None and limit is not None and cap > limit:
                raise ValueError(f"max_tokens_per_call ({cap}) is above {budget} ({limit})")
        return self


class RFTConfig(_Strict):
    """One weight phase of online rejection-sampling fine-tuning (docs/algorithm.md)."""

    prompts_per_step: int = Field(
        default=32, ge=1, le=MAX_TASKS, description="train-split prompts per step"
    )
    samples_per_prompt: int = Field(
        default=8, ge=1, le=MAX_SAMPLES, description="n rollouts per prompt"
    )
    temperature: float | None = Field(
        default=1.0,
        ge=0,
        le=10,
        description="RFT's sampling calls run at it, whatever the harness sets (null: the "
        "harness decides)",
    )
    threshold: float = Field(
        default=0.5,
        ge=-1,
        le=1,
        description="accept rollouts scoring above this (below 0: every scored rollout, as a "
        "rehearsal trains on what the demo model gets wrong)",
    )
    lr: float = Field(default=2e-4, gt=0, le=1)
    # verl's actor optimizer default (verl/trainer/config/optim/fsdp.yaml: weight_decay 0.01),
    # which no script of the release overrides
    weight_decay: float = Field(default=0.01, ge=0, le=10, description="AdamW weight decay")
    batch_size: int = Field(
        default=16,
        ge=1,
        le=1_000_000,
        description="per optimizer step: examples (batch_unit call) or rollouts (rollout)",
    )
    batch_unit: Literal["call", "rollout"] = Field(
        default="call",
        description="call: a mini-batch holds batch_size model calls; rollout: every call of "
        "batch_size accepted rollouts (the release's SFT mini-batch of whole trajectories)",
    )
    batch_scope: Literal["global", "rank"] = Field(
        default="global",
        description="global: batch_size is the whole optimizer step, split over the training "
        "processes; rank: batch_size per data-parallel process, so N processes step on N x "
        "batch_size (verl's SFT mini-batch, as the release's online RSFT runs it)",
    )
    micro_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="rows per forward pass on each training process, for memory only "
        "(default: its whole share of the mini-batch at once)",
    )
    epochs: int = Field(default=1, ge=1, le=1000)
    max_seq_len: int | None = Field(
        default=None,
        ge=16,
        le=1 << 20,
        description="tokens per example (default: the rollout token budget, which no call exceeds)",
    )
    max_seq_len_per_turn: int = Field(
        default=0,
        ge=0,
        le=1 << 16,
        description="tokens added to max_seq_len per turn of the phase's harness (its "
        "MAX_TURNS within [rollout] max_calls): the release's search-QA response window "
        "MAX_RESP_LENGTH + 1024 x turns",
    )
    lora: bool = Field(default=True, description="LoRA adapter (peft); false: full fine-tune")
    optimizer_state: Literal["phase", "step", "run"] = Field(
        default="phase",
        description="phase: one AdamW for the whole weight phase, its state carried from step "
        "to step; run: carried across weight phases too (the next phase continues the "
        "optimizer saved with its starting checkpoint, as verl's resume does); step: a fresh "
        "AdamW every RFT step",
    )
    lora_rank: int = Field(default=16, ge=1, le=4096)
    lora_alpha: int = Field(default=32, ge=1, le=1 << 16)
    lora_targets: list[str] = Field(
        default=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    # Retention (app/training/retention.py): a full fine-tune's checkpoint is the whole model,
    # so a long run keeps the weights of only some; the rows stay. Unset: every one is kept.
    keep_last: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STEPS,
        description="keep the weights of the newest N trained checkpoints (plus those the run "
        "refers to: phases, test points, the served one); older ones are dropped",
    )
    keep_every: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STEPS,
        description="also keep every Mth RFT step's checkpoint (the release saves every 7)",
    )
    max_disk_gb: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="disk budget of $WHALE_HOME/checkpoints: over it, more are dropped, oldest "
        "first; still over, the run pauses",
    )


class LLMProposerConfig(_Strict):
    """The `llm` proposer: one chat model over an OpenAI-compatible endpoint."""

    url: str | None = Field(default=None, description="default: the run's own model server")
    model: str | None = Field(default=None, description="default: the run's current checkpoint")
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable, never stored
    temperature: float = Field(default=0.8, ge=0, le=10)
    max_tokens: int = Field(default=4096, ge=64, le=1 << 20)
    failures: int = Field(default=3, ge=0, le=1000, description="failing traces shown to the model")
    successes: int = Field(
        default=2, ge=0, le=1000, description="passing traces shown to the model"
    )
    price_in_per_mtok: float | None = Field(
        default=None, ge=0, le=10**6, description="$ per 1M prompt tokens"
    )
    price_out_per_mtok: float | None = Field(
        default=None, ge=0, le=10**6, description="$ per 1M output tokens"
    )

    @model_validator(mode="after")
    def _model_with_url(self):
        if self.url and not self.model:
            raise ValueError("a proposer url needs its model name (llm.model)")
        return self


class AgentProposerConfig(_Strict):
    """The `agent` proposer: a coding-agent command run in the materialized archive."""

    # a known agent (app/search/agent_presets.py), or a command of one's own
    preset: Literal["claude-code", "codex"] | None = None
    # argv; {workspace}, {k} and {iteration} are substituted. The agent reads SKILL.md there.
    command: list[str] = Field(default_factory=list)
    isolation: Literal["bwrap", "none"] = "bwrap"  # bwrap: only the workspace is writable
    network: bool = True  # a coding agent needs its model API; false cuts all network
    env: list[str] = Field(default_factory=list, description="variables passed to the agent")
    # bwrap: the only hosts its network reaches, through the workbench's egress proxy
    # ("host" means port 443, or "host:port"); default: the preset's API host
    allow_hosts: list[str] | None = Field(default=None, max_length=100)
    # bwrap: more host folders the agent may read (a CLI installed outside /usr, /opt...)
    read_paths: list[str] = Field(default_factory=list, max_length=100)
    # a preset's model, reasoning effort and tools (default: the preset's, see agent_presets.py)
    model: str | None = Field(default=None, max_length=200)
    effort: str | None = Field(default=None, max_length=50)
    allowed_tools: list[str] | None = Field(default=None, max_length=100)
    system_prompt: str | None = Field(
        default=None,
        max_length=10_000,
        description="appended to the agent's own system prompt (claude-code), as the "
        "release's chess proposer adds its rules",
    )

    @model_validator(mode="after")
    def _one_way(self):
        if self.preset and self.command:
            raise ValueError("give a preset or a command, not both")
        return self


class SearchConfig(_Strict):
    """One harness phase of Meta-Harness-style search (docs/algorithm.md)."""

    proposer: str = Field(
        default="knobs",
        description="knobs | llm | agent | gepa, or a plugin's name (app/search/proposers.py; "
        "checked where an experiment is loaded, so this schema stands below the proposers)",
    )
    candidates: int = Field(default=3, ge=1, le=1000, description="K candidates per iteration")
    tasks: int | None = Field(
        default=None, ge=1, le=MAX_TASKS, description="harness-split tasks (default all)"
    )
    samples: int = Field(
        default=1, ge=1, le=MAX_SAMPLES, description="rollouts per harness-split task"
    )
    smoke: bool = True  # one sandbox rollout before a candidate is evaluated
    smoke_timeout_s: float = Field(default=120.0, gt=0, le=86_400)
    proposer_timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=7 * 86_400,
        description="seconds one proposing session may take (default: the agent preset's own, "
        "2400 for claude-code as the release ran it; else 1800)",
    )
    workspace: Literal["run", "round"] = Field(
        default="run",
        description="the agent proposer's folder: run: one for the whole run, every harness of "
        "it; round: a fresh one each harness phase, with only that phase's harnesses, scores "
        "and reports (the release's way)",
    )
    fixed_functions: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="module-level functions every candidate keeps exactly as the incoming "
        'harness has them, e.g. ["run"]: the release\'s chess candidate, a restricted module '
        "over a fixed runner",
    )
    max_code_bytes: int = Field(default=200_000, ge=100, le=10_000_000)
    on_proposer_error: Literal["continue", "end"] = "continue"
    # when a candidate replaces the incumbent (app/search/acceptance.py, docs/statistics.md)
    acceptance: Literal["greedy", "paired", "sequential"] = "greedy"
    false_commit: float = Field(
        default=0.05, gt=0, lt=1, description="paired, sequential: the false-commit level"
    )
    sequential_chunk: int = Field(
        default=8, ge=1, le=MAX_TASKS, description="sequential: tasks evaluated between looks"
    )
    # a proposer's random choices (gepa's parents); an experiment's seed unless set here
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    llm: LLMProposerConfig = Field(default_factory=LLMProposerConfig)
    agent: AgentProposerConfig = Field(default_factory=AgentProposerConfig)
    options: dict[str, Any] = Field(
        default_factory=dict, description="a plugin proposer's own settings"
    )


Strategy = Literal["whale", "weight_only", "harness_only", "stagewise", "fast_slow"]
HARNESS_KEYS = ("harness", "harness_id", "harness_code")  # at most one: the incoming harness


# [switching]'s lengths were once named like [budget]'s run totals (and before that
# `harness_iterations`): the old name, and the one it has now
EARLIER_NAMES = {
    "harness_iterations": "proposing_iterations_per_phase",
    "proposing_iterations": "proposing_iterations_per_phase",
    "weight_steps": "weight_steps_per_phase",
}


class Switching(_Strict):
    """When a phase ends. `fixed`: a set length. `adaptive`: patience (docs/algorithm.md).

    Every harness phase begins with iteration 0, the incoming harness evaluated under the
    phase's checkpoint; the iteration counts below are of the *proposing* iterations after it.
    The release's I = 6 counts iteration 0 (run/lib/alternate.sh, ROUND_MH_ITERS=5): here
    `proposing_iterations_per_phase = 5`. (A run's totals are [budget]'s `weight_steps` and
    `proposing_iterations`.)"""

    rule: Literal["fixed", "adaptive"] = "fixed"
    weight_steps_per_phase: int = Field(
        default=2, ge=1, le=MAX_STEPS, description="fixed: RFT steps per weight phase (E)"
    )
    proposing_iterations_per_phase: int = Field(
        default=2,
        ge=1,
        le=MAX_STEPS,
        description="fixed: proposing iterations per harness phase, after the incoming "
        "harness's evaluation (the release's I - 1)",
    )
    # adaptive, harness phase: signal = best frontier success on the harness split (proposing
    # iterations, as the release's --early-stop-min-iters and --iterations count them)
    harness_min_iterations: int = Field(default=5, ge=1, le=MAX_STEPS)
    harness_patience: int = Field(default=2, ge=1, le=MAX_STEPS)
    harness_max_iterations: int = Field(default=15, ge=1, le=MAX_STEPS)
    # adaptive, weight phase: signal = mean training reward per step, smoothed over a window
    weight_window: int = Field(default=2, ge=1, le=MAX_STEPS)
    weight_burn_in: int = Field(default=2, ge=0, le=MAX_STEPS)
    weight_patience: int = Field(default=2, ge=1, le=MAX_STEPS)
    weight_max_steps: int = Field(default=10, ge=1, le=MAX_STEPS)
    # the smoothed reward of step i is the mean of the steps of its window that exist, so the
    # first steps of a phase count with shorter windows (the rule as the paper states it)
    weight_partial_windows: bool = False
    # "weight": the run ends on a weight phase, as the paper's runs do: a harness phase leaves
    # the rollouts of one RFT step, and the run's last phase uses them
    end_on: Literal["any", "weight"] = "any"

    @model_validator(mode="before")
    @classmethod
    def _earlier_names(cls, data: Any) -> Any:
        """Runs stored before the keys were renamed kept them under their old names, with the
        same meaning; a file that says one now is refused in parse() (EARLIER_NAMES)."""
        return renamed(data, EARLIER_NAMES)


class TestSchedule(_Strict):
    k: int = Field(default=4, ge=1, le=MAX_SAMPLES, description="samples per test task (mean@k)")
    tasks: int | None = Field(
        default=None, ge=1, le=MAX_TASKS, description="first N test tasks (default all)"
    )
    at_start: bool = True  # a point before anything is optimized
    after_phase: bool = True
    every_weight_steps: int = Field(
        default=0, ge=0, le=MAX_STEPS, description="also every N RFT steps; 0: off"
    )


class Budget(_Strict):
    """The run ends when any is used up; a step or iteration that would overshoot the rollout
    budget is not started, so strategies compare at equal rollouts.

    `weight_steps` and `proposing_iterations` count in the release's units instead (its
    TOTAL_STEPS and its harness-only ITERATIONS): no RFT step past the first, no proposing
    iteration past the second. An alternating run (whale, fast_slow) ends with the weight phase
    that takes its last step, as the release's alternate.sh does; stagewise takes every weight
    step, then proposes until `proposing_iterations`."""

    rollouts: int | None = Field(default=None, ge=1, le=10**10)
    tokens: int | None = Field(default=None, ge=1, le=10**14)
    proposer_usd: float | None = Field(default=None, ge=0, le=10**7)
    wall_s: float | None = Field(default=None, gt=0, le=10**8)  # about three years
    weight_steps: int | None = Field(
        default=None, ge=1, le=MAX_STEPS, description="RFT steps over the whole run"
    )
    proposing_iterations: int | None = Field(
        default=None, ge=1, le=MAX_STEPS, description="proposing iterations over the whole run"
    )
    max_phases: int = Field(default=50, ge=1, le=MAX_STEPS)  # a backstop when no budget is set
    # a fork (`whale run --from RUN:PHASE`): "continue" (the default) counts what the parent
    # had spent by the fork point against these budgets; "fresh" starts them at zero
    after_fork: Literal["continue", "fresh"] | None = None


class Runtime(_Strict):
    """Process-level choices; `whale run` applies them, a server refuses a mismatch."""

    backend: Literal["local", "vllm"] | None = None
    llm_url: str | None = None
    llm_model: str | None = None
    sandbox: Literal["auto", "process", "docker"] | None = None
    vllm_max_model_len: int | None = Field(
        default=None, ge=16, le=1 << 22, description="the launched vLLM's --max-model-len"
    )
    colocate: bool | None = Field(
        default=None,
        description="vLLM and the trainer on the same GPUs: vLLM sleeps during each training "
        "step (docs/gpu-hosts.md)",
    )


def distinct_seeds(seeds: list[int]) -> bool:
    """The rule of a seed group (the file's `seeds`, `whale run --seeds`): the same seed twice
    would be one run counted twice."""
    return len(set(seeds)) == len(seeds) and all(0 <= s <= MAX_SEED for s in seeds)


class Experiment(_Strict):
    name: str = Field(min_length=1, max_length=200)
    domain: str = "arith"
    harness: Path | None = None  # a file (over HTTP: one of harness_archive/); default: the seed
    harness_id: int | None = Field(default=None, ge=1, le=2**63 - 1, description="a stored harness")
    harness_code: str | None = Field(default=None, max_length=10_000_000, description="the code")
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    # one run per seed, grouped (`whale run --seeds 0,1,2` overrides); compared as a group
    seeds: list[int] | None = Field(default=None, min_length=1, max_length=100)
    strategy: Strategy = "whale"
    stagewise_weight_share: float = Field(
        default=0.5, gt=0, lt=1, description="stagewise: rollout share for weights"
    )
    switching: Switching = Field(default_factory=Switching)
    rft: RFTConfig = Field(default_factory=RFTConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    test: TestSchedule = Field(default_factory=TestSchedule)
    budget: Budget = Field(default_factory=Budget)
    runtime: Runtime = Field(default_factory=Runtime)
    sampling: Sampling = Field(default_factory=Sampling)
    rollout: RolloutLimits = Field(default_factory=RolloutLimits)
    scoring: str | None = Field(
        default=None,
        max_length=40,
        description="the verifier's mode, e.g. paper (the release's rules); default: the domain's",
    )

    @model_validator(mode="after")
    def _consistent(self):
        given = [k for k in HARNESS_KEYS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of {', '.join(HARNESS_KEYS)} (given: {', '.join(given)})")
        if self.seeds is not None and not distinct_seeds(self.seeds):
            raise ValueError(f"seeds: distinct integers from 0 to {MAX_SEED}, not {self.seeds}")
        if "seed" not in self.rft.model_fields_set:  # the run's seed orders and trains RFT
            self.rft.seed = self.seed
        if "seed" not in self.search.model_fields_set:  # ...and draws a proposer's choices
            self.search.seed = self.seed
        if self.switching.end_on == "weight" and (
            self.strategy not in ("whale", "stagewise", "fast_slow") or self.budget.rollouts is None
        ):
            raise ValueError(
                "switching.end_on = weight needs strategy whale, stagewise or fast_slow and "
                "budget.rollouts (the last weight step is kept out of the rollout budget)"
            )
        if self.strategy == "fast_slow" and (
            self.search.proposer != "gepa" or self.switching.rule != "fixed"
        ):  # stated in the file, not implied, so the run's config says what ran
            raise ValueError(
                "strategy fast_slow interleaves RFT with prompt evolution every round: set "
                '[search] proposer = "gepa" and [switching] rule = "fixed"'
            )
        budget = self.budget
        if (
            self.strategy == "stagewise"
            and budget.rollouts is None
            and None
            in (
                budget.weight_steps,
                budget.proposing_iterations,
            )
        ):
            raise ValueError(
                "strategy stagewise needs budget.rollouts (it splits the rollouts) or both "
                "budget.weight_steps and budget.proposing_iterations (the length of each stage)"
            )
        unused = {"weight_only": "proposing_iterations", "harness_only": "weight_steps"}
        never = unused.get(self.strategy)
        if never and getattr(budget, never) is not None:
            raise ValueError(f"budget.{never}: a {self.strategy} run has no such phase")
        rft_t, sampled_t = self.rft.temperature, self.sampling.forced().get("temperature")
        if None not in (rft_t, sampled_t) and rft_t != sampled_t:
            raise ValueError(
                f"rft.temperature ({rft_t}) differs from the fixed sampling.temperature "
                f"({sampled_t}): with fixed decoding every call, RFT's included, runs at one"
            )
        return self
