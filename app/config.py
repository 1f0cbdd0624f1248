"""Settings from environment variables (WHALE_*). Experiment configs (TOML) come with the loop."""
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WHALE_")

    home: Path = Field(default=Path.home() / ".whale", description="database, logs, run archives")
    # The converted model is big and the same for every store, so tests may share one cache.
    model_cache: Path | None = Field(default=None, description="default: $WHALE_HOME/models")
    llm_url: str | None = Field(default=None, description="attach to this OpenAI-compatible server")
    llm_model: str | None = Field(default=None, description="model name to request at llm_url")
    sandbox: Literal["auto", "process", "docker"] = "auto"
    sandbox_runtime: str | None = Field(default=None, description='docker runtime, e.g. "runsc"')
    sandbox_image: str | None = Field(default=None, description="use this image, do not build")
    runtime_dir: Path | None = Field(default=None, description="sockets and files sandboxes bind")
    host: str = "127.0.0.1"
    port: int = 8000
    concurrency: int = 32  # rollouts in flight at once
    rollout_timeout: float = 60.0  # wall-clock seconds one rollout may take
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
