"""Settings from environment variables (WHALE_*): the machine's, not an experiment's. Every key
of an experiment file is in app/experiment_schema.py."""

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# The budgets of one rollout a setting gives (WHALE_ROLLOUT_<NAME>) and a run's [rollout] may set
ROLLOUT_LIMITS = ("max_calls", "max_tokens", "max_tokens_per_call", "infra_retries")


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
    vllm_max_model_len: int | None = Field(
        default=None, description="--max-model-len of a launched vLLM (default: vLLM's)"
    )
    # The GPU split of one host (app/fit.py): a launched vLLM runs on these, the trainer on
    # the others; unset, both see every GPU, which only colocation makes work.
    vllm_gpus: str | None = Field(default=None, description='GPU ids of a launched vLLM, "0,1"')
    colocate: bool = Field(
        default=False, description="vLLM sleeps while the trainer trains on the same GPUs"
    )
    sandbox: Literal["auto", "process", "docker"] = "auto"
    sandbox_runtime: str | None = Field(default=None, description='docker runtime, e.g. "runsc"')
    sandbox_image: str | None = Field(default=None, description="use this image, do not build")
    runtime_dir: Path | None = Field(default=None, description="sockets and files sandboxes bind")
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = Field(
        default=None, description="web access token (default: a fresh one at each start)"
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
    # A rollout's budgets where its run's [rollout] leaves them unset (rollout_limits); the
    # only place their defaults are written (app/llm/generation.py's Generation reads them)
    rollout_max_calls: int = Field(default=32, ge=1)  # model calls one rollout may make
    rollout_max_tokens: int = Field(default=16384, ge=1)  # prompt + completion tokens
    rollout_max_tokens_per_call: int = Field(default=1024, ge=1)  # completion cap of one call
    # model and tool calls one rollout may have open at once; more are refused ("open_calls")
    rollout_max_open_calls: int = Field(default=8, ge=1)
    # the largest request body the gateway reads from a sandbox; larger ones get 413 unread
    gateway_max_body_mb: float = Field(default=16.0, gt=0)
    # tries more for a rollout that ended by an infrastructure failure (backend unreachable or
    # failing, sandbox not started) before it is recorded as one
    rollout_infra_retries: int = Field(default=2, ge=0)
    # Training through `accelerate launch` (several GPUs or machines); unset: one plain process.
    train_accelerate_config: Path | None = Field(
        default=None, description="accelerate config YAML, e.g. configs/accelerate/fsdp.yaml"
    )
    train_accelerate_args: str | None = Field(
        default=None, description="more `accelerate launch` arguments (shell words)"
    )
    # Each run also logged to these experiment trackers, comma-separated: mlflow, wandb
    # (app/trackers.py); where they log is their own settings (MLFLOW_TRACKING_URI, WANDB_MODE)
    trackers: str | None = Field(
        default=None, description='send runs to "mlflow", "wandb" or "mlflow,wandb"'
    )
    # how long a run's end waits for its trackers to log what is left
    tracker_timeout: float = Field(default=30.0, gt=0)

    def rollout_limits(self) -> dict[str, int]:
        """The budgets of a rollout whose run's [rollout] does not set them, as
        app/llm/generation.py's Generation names them."""
        return {name: getattr(self, f"rollout_{name}") for name in ROLLOUT_LIMITS}

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
