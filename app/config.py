"""Settings from environment variables (WHALE_*). Experiment configs (TOML) come with the loop."""
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WHALE_")

    home: Path = Field(default=Path.home() / ".whale", description="database, logs, run archives")
    # The converted model is big and the same for every store, so tests may share one cache.
    model_cache: Path | None = Field(default=None, description="default: $WHALE_HOME/models")
    llm_url: str | None = Field(default=None, description="attach to this OpenAI-compatible server")
    llm_model: str | None = Field(default=None, description="model name to request at llm_url")
    backend: Literal["local", "vllm"] = "local"  # what serves the model (see app/llm/)
    vllm_urls: str | None = Field(default=None, description="comma-separated vLLM servers to attach")
    vllm_python: str | None = Field(default=None, description="python with vLLM, to launch one")
    vllm_args: str | None = Field(default=None, description="extra vLLM arguments (shell words)")
    vllm_max_lora_rank: int = 64  # the largest LoRA rank a launched server accepts
    sandbox: Literal["auto", "process", "docker"] = "auto"
    sandbox_runtime: str | None = Field(default=None, description='docker runtime, e.g. "runsc"')
    sandbox_image: str | None = Field(default=None, description="use this image, do not build")
    runtime_dir: Path | None = Field(default=None, description="sockets and files sandboxes bind")
    host: str = "127.0.0.1"
    port: int = 8000
    concurrency: int = 32  # rollouts in flight at once
    rollout_timeout: float = 180.0  # wall-clock seconds one rollout may take, model calls included
    rollout_memory_mb: int = 1024
    rollout_max_calls: int = 32  # model calls one rollout may make
    rollout_max_tokens: int = 16384  # prompt + completion tokens over one rollout

    @property
    def db_path(self) -> Path:
        return self.home / "whale.db"

    @property
    def models_dir(self) -> Path:
        return self.model_cache or self.home / "models"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    def ensure_dirs(self) -> None:
        for d in (self.home, self.models_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)


class RFTConfig(BaseModel):
    """One weight phase of online rejection-sampling fine-tuning (reference/whale.md)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(default=2, ge=1, description="RFT steps in the phase")
    prompts_per_step: int = Field(default=32, ge=1, description="train-split prompts per step")
    samples_per_prompt: int = Field(default=8, ge=1, description="n rollouts per prompt")
    temperature: float = 1.0  # the harness decides; recorded for the report
    threshold: float = Field(default=0.5, description="accept rollouts scoring above this")
    lr: float = Field(default=2e-4, gt=0)
    batch_size: int = Field(default=16, ge=1, description="examples per optimizer step")
    epochs: int = Field(default=1, ge=1)
    max_seq_len: int = Field(default=512, ge=16)
    lora: bool = Field(default=True, description="LoRA adapter (peft); false: full fine-tune")
    lora_rank: int = Field(default=16, ge=1)
    lora_alpha: int = Field(default=32, ge=1)
    lora_targets: list[str] = Field(
        default=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    seed: int = 0
