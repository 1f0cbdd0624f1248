"""Settings from environment variables (WHALE_*). Experiment configs (TOML) come with the loop."""

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WHALE_")

    home: Path = Field(default=Path.home() / ".whale", description="database, logs, run archives")
    # The converted model is big and the same for every store, so tests may share one cache.
    model_cache: Path | None = Field(default=None, description="default: $WHALE_HOME/models")
    llm_url: str | None = Field(default=None, description="attach to this OpenAI-compatible server")
    llm_model: str | None = Field(default=None, description="model name to request at llm_url")
    backend: Literal["local", "vllm"] = "local"  # what serves the model (see app/llm/)
    local_dtype: Literal["bfloat16", "float32"] = Field(
        default="bfloat16", description="what the local model server decodes in"
    )
    vllm_urls: str | None = Field(
        default=None, description="comma-separated vLLM servers to attach"
    )
    vllm_python: str | None = Field(default=None, description="python with vLLM, to launch one")
    vllm_args: str | None = Field(default=None, description="extra vLLM arguments (shell words)")
    vllm_max_lora_rank: int = 64  # the largest LoRA rank a launched server accepts
    sandbox: Literal["auto", "process", "docker"] = "auto"
    sandbox_runtime: str | None = Field(default=None, description='docker runtime, e.g. "runsc"')
    sandbox_image: str | None = Field(default=None, description="use this image, do not build")
    runtime_dir: Path | None = Field(default=None, description="sockets and files sandboxes bind")
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = Field(
        default=None, description="web access token (default: generated when host is not loopback)"
    )
    allowed_hosts: str | None = Field(
        default=None,
        description="more Host names the web server "
        "answers to, comma-separated (e.g. a reverse proxy's)",
    )
    concurrency: int = 32  # rollouts in flight at once
    # How much lower the CPU priority of `whale serve`'s loop process, and of what it starts,
    # is than its pages' (nice; 0: the same): on a busy machine a page then waits on nothing
    loop_nice: int = Field(default=10, ge=0, le=19)
    # seconds of the harness's own time one rollout may take: the wait on its model and tool
    # calls is not counted (that is bounded by the call and token budgets)
    rollout_timeout: float = 180.0
    rollout_memory_mb: int = 1024
    rollout_max_calls: int = 32  # model calls one rollout may make
    rollout_max_tokens: int = 16384  # prompt + completion tokens over one rollout
    # tries more for a rollout that ended by an infrastructure failure (backend unreachable or
    # failing, sandbox not started) before it is recorded as one
    rollout_infra_retries: int = 2
    # Training through `accelerate launch` (several GPUs or machines); unset: one plain process.
    train_accelerate_config: Path | None = Field(
        default=None, description="accelerate config YAML, e.g. configs/accelerate/fsdp.yaml"
    )
    train_accelerate_args: str | None = Field(
        default=None, description="more `accelerate launch` arguments (shell words)"
    )

    @property
    def db_path(self) -> Path:
        return self.home / "whale.db"

    @property
    def models_dir(self) -> Path:
        return self.model_cache or self.home / "models"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def archive_dir(self) -> Path:
        """Where runs are materialized as plain files for the `agent` proposer."""
        return self.home / "harness_archive"

    @property
    def backend_name(self) -> str:
        """Which backend serves the model, as app/llm/generation.py names them."""
        return "vllm" if self.backend == "vllm" else "endpoint" if self.llm_url else "local"

    def ensure_dirs(self) -> None:
        for d in (self.home, self.models_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)


class RFTConfig(BaseModel):
    """One weight phase of online rejection-sampling fine-tuning (docs/algorithm.md)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(default=2, ge=1, le=MAX_STEPS, description="RFT steps in the phase")
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
        default=0.5, ge=0, le=1, description="accept rollouts scoring above this"
    )
    lr: float = Field(default=2e-4, gt=0, le=1)
    batch_size: int = Field(
        default=16, ge=1, le=1_000_000, description="examples per optimizer step"
    )
    epochs: int = Field(default=1, ge=1, le=1000)
    max_seq_len: int | None = Field(
        default=None,
        ge=16,
        le=1 << 20,
        description="tokens per example (default: the rollout token budget, which no call exceeds)",
    )
    lora: bool = Field(default=True, description="LoRA adapter (peft); false: full fine-tune")
    optimizer_state: Literal["phase", "step"] = Field(
        default="phase",
        description="phase: one AdamW for the whole weight phase, its state carried from step "
        "to step (the release's way); step: a fresh AdamW every RFT step",
    )
    lora_rank: int = Field(default=16, ge=1, le=4096)
    lora_alpha: int = Field(default=32, ge=1, le=1 << 16)
    lora_targets: list[str] = Field(
        default=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED)


class LLMProposerConfig(BaseModel):
    """The `llm` proposer: one chat model over an OpenAI-compatible endpoint."""

    model_config = ConfigDict(extra="forbid")

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


class AgentProposerConfig(BaseModel):
    """The `agent` proposer: a coding-agent command run in the materialized archive."""

    model_config = ConfigDict(extra="forbid")

    # a known agent (app/search/agent_presets.py), or a command of one's own
    preset: Literal["claude-code", "codex"] | None = None
    # argv; {workspace}, {k} and {iteration} are substituted. The agent reads SKILL.md there.
    command: list[str] = Field(default_factory=list)
    isolation: Literal["bwrap", "none"] = "bwrap"  # bwrap: only the workspace is writable
    network: bool = True  # a coding agent needs its model API; false cuts all network
    env: list[str] = Field(default_factory=list, description="variables passed to the agent")

    @model_validator(mode="after")
    def _one_way(self):
        if self.preset and self.command:
            raise ValueError("give a preset or a command, not both")
        return self


class SearchConfig(BaseModel):
    """One harness phase of Meta-Harness-style search (docs/algorithm.md)."""

    model_config = ConfigDict(extra="forbid")

    proposer: str = Field(
        default="knobs",
        description="knobs | llm | agent | gepa, or a plugin's name (app/search/proposers.py)",
    )
    iterations: int = Field(
        default=5, ge=0, le=MAX_STEPS, description="proposing iterations after iteration 0"
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
    proposer_timeout_s: float = Field(default=1800.0, gt=0, le=7 * 86_400)
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

    @field_validator("proposer")
    @classmethod
    def _known_proposer(cls, name: str) -> str:
        from app.search.proposers import check_proposer

        check_proposer(name)
        return name
