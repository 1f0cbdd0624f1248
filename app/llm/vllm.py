"""The vLLM backend: attach to running vLLM OpenAI servers, or launch and supervise one.

Several server URLs are data-parallel replicas of the same base model: chat requests go to them
in turn, and every LoRA adapter is loaded on all of them. A LoRA checkpoint is hot-loaded through
vLLM's runtime adapter API (`/v1/load_lora_adapter`, allowed by
VLLM_ALLOW_RUNTIME_LORA_UPDATING) and selected per request by passing its name as `model`, so
evaluations under different checkpoints share one server. A full fine-tune is a new weights
folder: its weights are loaded into the running servers in place (`serve_weights`), or where
that fails the managed server restarts on it.

vLLM pins its own torch and transformers, so it runs from its own Python environment
(`scripts/vllm-cpu.sh` builds one with the CPU build) and this module only talks HTTP to it.
"""

import asyncio
import itertools
import json
import logging
import os
import shlex
import shutil
import struct
import subprocess
from pathlib import Path

import httpx

from app.llm.client import BackendError, BackendTimeout, BackendUnreachable, ChatEndpoint
from app.llm.supervisor import SupervisedServer

log = logging.getLogger(__name__)
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CPU_KV_CACHE = "1G"  # vLLM on CPU otherwise reserves 92% of the machine's memory up front


class VLLMError(RuntimeError):
    """The vLLM backend cannot do what was asked; the message says why."""


class AdapterError(VLLMError):
    """A LoRA adapter that is missing, malformed, or does not fit the base model."""


def _api_url(url: str) -> str:
    """Accept `http://host:port` or `http://host:port/v1`; return the latter."""
    url = url.strip().rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _root(api_url: str) -> str:
    return api_url.removesuffix("/v1")


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
        return body.get("error", {}).get("message") or body.get("detail") or response.text
    except (ValueError, AttributeError):
        return response.text


def flag_value(args: list[str] | tuple[str, ...], flag: str) -> str | None:
    """A flag's value among vLLM arguments (`--flag N` or `--flag=N`)."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(f"{flag}="):
            return arg.partition("=")[2]
    return None


def is_cpu_build(python: str) -> bool:
    """Whether `python` has the CPU build of vLLM (then it needs eager mode and a KV-cache size)."""
    probe = "import importlib.metadata as m; m.version('vllm-cpu')"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


# --- adapters -----------------------------------------------------------------------------


def _tensor_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor names and shapes from a safetensors header (no weights are read)."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def _base_shapes(base: Path) -> dict[str, list[int]]:
    shapes = {}
    for file in sorted(base.glob("*.safetensors")):
        shapes.update(_tensor_shapes(file))
    return shapes


def check_adapter(adapter: Path, base: Path | None) -> None:
    """Raise AdapterError unless `adapter` is a peft LoRA folder whose matrices fit `base`.

    vLLM checks the rank and the config, but on this version it accepts an adapter made for
    another architecture and serves garbage, so the shapes are compared here against the
    base's weights (when the base folder is readable from this machine).
    """
    if not adapter.is_dir():
        raise AdapterError(f"adapter folder {adapter} does not exist")
    config_file = adapter / "adapter_config.json"
    if not config_file.is_file():
        raise AdapterError(f"{adapter} has no adapter_config.json: not a peft adapter folder")
    try:
        config = json.loads(config_file.read_text())
    except ValueError as exc:
        raise AdapterError(f"{config_file} is not valid JSON: {exc}") from None
    if config.get("peft_type", "LORA") != "LORA":
        kind = config.get("peft_type")
        raise AdapterError(f"{adapter} is a {kind} adapter; vLLM serves LoRA adapters only")
    weights = adapter / "adapter_model.safetensors"
    if base is None or not weights.is_file() or not any(base.glob("*.safetensors")):
        return
    base_shapes = _base_shapes(base)
    for name, shape in sorted(_tensor_shapes(weights).items()):
        # base_model.model.<module>.lora_A.weight -> <module>.weight in the base checkpoint
        for part, dim in ((".lora_A.weight", 1), (".lora_B.weight", 0)):
            if not name.endswith(part):
                continue
            module = name.removeprefix("base_model.model.").removesuffix(part)
            target = base_shapes.get(module + ".weight")
            if target is None:
                raise AdapterError(
                    f"adapter {adapter} does not fit base model {base}: "
                    f"the base has no module {module}"
                )
            if shape[dim] != target[dim]:
                side = "input" if dim == 1 else "output"
                raise AdapterError(
                    f"adapter {adapter} does not fit base model {base}: {module} has {side} size "
                    f"{target[dim]} in the base but {shape[dim]} in the adapter"
                )


# --- a managed server ---------------------------------------------------------------------


def chat_parsers(model_path: Path, extra_args: list[str]) -> list[str]:
    """The tool-call and reasoning parsers a launched server needs: a harness that passes
    `tools` (the paper's h0 harnesses do, with tool_choice "auto") gets HTTP 400 from a vLLM
    started without them. Qwen3 and Qwen3.5 use qwen3_coder and qwen3 (docs/vllm.md); other
    models the hermes tool-call format. Those given in WHALE_VLLM_ARGS win."""
    try:
        kind = json.loads((model_path / "config.json").read_text()).get("model_type", "")
    except (OSError, ValueError):
        kind = ""
    qwen3 = kind.startswith("qwen3")
    args = []
    if "--tool-call-parser" not in extra_args and not any(
        a.startswith("--tool-call-parser=") for a in extra_args
    ):
        parser = "qwen3_coder" if qwen3 else "hermes"
        args += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    if qwen3 and flag_value(extra_args, "--reasoning-parser") is None:
        args += ["--reasoning-parser", "qwen3"]
    return args


class VLLMServer(SupervisedServer):
    """One vLLM OpenAI server as a supervised child process (app/llm/supervisor.py): restarted
    when it dies, its adapters then loaded again by the backend (on_restart)."""

    NAME = "vLLM"
    ERROR = VLLMError

    def __init__(
        self,
        python: str,
        model_path: Path,
        log_path: Path,
        port: int | None = None,
        max_lora_rank: int = 64,
        max_loras: int = 4,
        cpu: bool | None = None,
        extra_args: list[str] | tuple[str, ...] = (),
        max_model_len: int | None = None,
        sleep_mode: bool = False,
        gpus: str | None = None,
        say=log.info,
    ):
        super().__init__(log_path, port, say)
        self.sleep_mode = sleep_mode  # colocated with the trainer: it sleeps while it trains
        self.gpus = gpus  # CUDA_VISIBLE_DEVICES of the server (WHALE_VLLM_GPUS)
        self.python = python
        self.model_path = Path(model_path)
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.cpu = cpu
        self.extra_args = list(extra_args)
        self.max_model_len = max_model_len

    @property
    def model(self) -> str:
        return str(self.model_path)

    def command(self) -> list[str]:
        cmd = [
            self.python,
            "-m",
            SERVER_MODULE,
            "--model",
            str(self.model_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--enable-lora",
            "--max-lora-rank",
            str(self.max_lora_rank),
            "--max-loras",
            str(self.max_loras),
        ]
        if self.cpu:
            # The CPU build has no compiled graphs to capture, and sizes its KV cache from a
            # fraction of all memory unless told a size.
            cmd.append("--enforce-eager")
            if "--kv-cache-memory-bytes" not in self.extra_args:
                cmd += ["--kv-cache-memory-bytes", CPU_KV_CACHE]
            # A seeded request whose prompt is prefilled in chunks kills the CPU engine ("CPU
            # Generator does not use offset", vllm-cpu 0.32): with many rollouts in flight the
            # batch's prompts no longer fit one step, so prompts are prefilled whole.
            if not any(a.endswith("chunked-prefill") for a in self.extra_args):
                cmd.append("--no-enable-chunked-prefill")
        cmd += chat_parsers(self.model_path, self.extra_args)
        if self.sleep_mode and "--enable-sleep-mode" not in self.extra_args:
            cmd.append("--enable-sleep-mode")  # /sleep and /wake_up (with VLLM_SERVER_DEV_MODE)
        if self.max_model_len:
            cmd += ["--max-model-len", str(self.max_model_len)]
        return cmd + self.extra_args

    def env(self) -> dict[str, str]:
        # The CPU build's engine core runs the model in its own process instead of starting a
        # worker process for it: two processes (API server, engine core) instead of three
        # (vllm-cpu 0.32 on 2 cores: 19 s of processor time and 19 s to healthy per start,
        # against 27 s and 27 s; tokens/s unchanged at 1 and 16 requests at once). The
        # environment's own setting wins.
        no_worker_process = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if self.cpu else {}
        return {
            **no_worker_process,
            **os.environ,
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",  # enables /v1/load_lora_adapter
            # enables /collective_rpc, through which new full weights are loaded in place
            # (serve_weights); the server listens on 127.0.0.1, which no sandbox reaches
            "VLLM_SERVER_DEV_MODE": "1",
            "HF_HUB_OFFLINE": "1",  # local folders only: never reach for a hub
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            **({"CUDA_VISIBLE_DEVICES": self.gpus} if self.gpus else {}),
        }

    def start(self, timeout: float = 600) -> None:
        """Start and wait until /health answers; then watch it. Raises VLLMError."""
        if not (self.model_path / "config.json").is_file():
            what = "has no config.json" if self.model_path.is_dir() else "does not exist"
            raise VLLMError(f"model folder {self.model_path} {what}: nothing for vLLM to serve")
        if not shutil.which(self.python):
            raise VLLMError(f"no python at {self.python} to run vLLM from")
        if self.cpu is None:
            self.cpu = is_cpu_build(self.python)
        super().start(timeout)

    def set_model_path(self, model_path: Path) -> None:
        """The weights a restart starts on (the server already holds them)."""
        with self._lock:
            self.model_path = Path(model_path)

    def restart(self, model_path: Path | None = None) -> None:
        """Stop and start again (on new weights when given); raises VLLMError."""
        if model_path is not None:
            self.set_model_path(model_path)
        super().restart()


# --- replicas -----------------------------------------------------------------------------


class ReplicaEndpoint(ChatEndpoint):
    """A ChatEndpoint over data-parallel replicas of one model: each request goes to the next
    replica in turn; a replica that cannot be reached is skipped for that request."""

    def __init__(self, base_urls: list[str], model: str, api_key: str | None = None):
        if not base_urls:
            raise ValueError("at least one server URL is needed")
        self.replicas = [ChatEndpoint(url, model, api_key) for url in base_urls]
        self.base_url = self.replicas[0].base_url  # what messages name
        self.model = model
        self.served = [0] * len(self.replicas)  # requests answered per replica
        self._turn = itertools.count()
        # After full weights are loaded in place the servers still call their model by the name
        # they started with: the new weights' name is sent as that one, and names of weights
        # no longer held are refused rather than answered by other weights.
        self.renamed: dict[str, str] = {}
        self.retired: set[str] = set()

    @property
    def base_urls(self) -> list[str]:
        return [r.base_url for r in self.replicas]

    async def chat(self, model: str, messages: list[dict], **sampling) -> dict:
        if model in self.retired:
            raise BackendError(
                f"model {model!r} is no longer served: the server holds newer weights", 404
            )
        model = self.renamed.get(model, model)
        first = next(self._turn)
        n = len(self.replicas)
        for i in range(n):
            index = (first + i) % n
            try:
                response = await self.replicas[index].chat(model, messages, **sampling)
            except BackendTimeout:
                raise  # it may still be generating: do not ask another replica as well
            except BackendUnreachable:
                if i == n - 1:
                    raise
                continue
            self.served[index] += 1
            return response

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.close()


# --- the backend --------------------------------------------------------------------------


class VLLMBackend:
    """What the workbench holds: the servers (attached or one launched), a ChatEndpoint over
    them, and the LoRA adapters loaded on them."""

    def __init__(
        self,
        urls: list[str] | tuple[str, ...] = (),
        *,
        model: str | None = None,
        python: str | None = None,
        model_path: Path | None = None,
        log_path: Path | None = None,
        max_lora_rank: int = 64,
        max_loras: int = 4,
        extra_args: list[str] | tuple[str, ...] = (),
        max_model_len: int | None = None,
        colocate: bool = False,
        gpus: str | None = None,
        say=log.info,
    ):
        given = flag_value(extra_args, "--max-model-len")
        if max_model_len and given is not None and given != str(max_model_len):
            raise VLLMError(
                f"--max-model-len given twice: {given} in WHALE_VLLM_ARGS, {max_model_len} as "
                "the context the run asks for; keep one"
            )
        self.urls = [_api_url(u) for u in urls if u.strip()]
        self.model = model  # what requests ask for by default: the base, or an adapter
        self.base: str | None = None  # the served base model's name
        self.python = python
        self.model_path = Path(model_path) if model_path else None
        self.log_path = log_path or Path("vllm-server.log")
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.extra_args = list(extra_args)
        # the context a launched server holds: prompt and completion of any one call fit in it
        self.max_model_len = None if given is not None else max_model_len
        self.colocate = colocate  # sleeps during each training step (sleep, wake_up)
        self.gpus = gpus
        self.say = say
        self.server: VLLMServer | None = None
        self.endpoint: ReplicaEndpoint | None = None
        self.adapters: dict[str, Path] = {}  # loaded on every replica, reloaded after a crash
        self.served_name: str | None = None  # what the servers call their model (--model)
        # Whether a server may be asleep with nothing left to wake it: attached ones (a workbench
        # that ended mid-step leaves them so), or after a wake that failed. ensure_awake asks.
        self.maybe_asleep = False
        self._waking = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings, model_path: Path | None = None, say=log.info) -> "VLLMBackend":
        """Attach to WHALE_VLLM_URLS, or launch WHALE_VLLM_PYTHON on `model_path`."""
        s = settings
        urls = (s.vllm_urls or "").split(",")
        return cls(
            urls,
            model=s.llm_model,
            python=s.vllm_python,
            model_path=model_path,
            log_path=s.logs_dir / "vllm-server.log",
            max_lora_rank=s.vllm_max_lora_rank,
            extra_args=shlex.split(s.vllm_args or ""),
            max_model_len=getattr(s, "vllm_max_model_len", None),
            colocate=getattr(s, "colocate", False),
            gpus=getattr(s, "vllm_gpus", None),
            say=say,
        )

    @property
    def base_model_path(self) -> Path | None:
        """The base weights folder, when it is readable here (adapters are checked against it)."""
        if self.base and Path(self.base).is_dir():
            return Path(self.base)
        return self.model_path

    async def start(self, timeout: float = 600) -> ReplicaEndpoint:
        if self.urls:
            self.model = await self._attach()
            self.say(f"model: attached to vLLM at {', '.join(self.urls)} ({self.model})")
            self.maybe_asleep = True
            await self.ensure_awake()
        else:
            self.model = await self._launch(timeout)
        self.endpoint = ReplicaEndpoint(self.urls, self.model)
        return self.endpoint

    async def _attach(self) -> str:
        """Check every replica answers, and serves the same base model; return its name."""
        served: dict[str, set[str]] = {}  # base models and loaded adapters
        bases: dict[str, set[str]] = {}
        parent: dict[str, str] = {}  # adapter -> its base
        async with httpx.AsyncClient(timeout=10) as client:
            for url in self.urls:
                try:
                    (await client.get(_root(url) + "/health")).raise_for_status()
                    models = (await client.get(url + "/models")).json()["data"]
                except (httpx.HTTPError, ValueError, KeyError) as exc:
                    raise VLLMError(f"no vLLM server answers at {url}: {exc}") from None
                served[url] = {m["id"] for m in models}
                bases[url] = {m["id"] for m in models if not m.get("parent")}
                parent.update({m["id"]: m["parent"] for m in models if m.get("parent")})
        if self.model:
            missing = [url for url, names in served.items() if self.model not in names]
            if missing:
                known = sorted(set().union(*served.values()))
                raise VLLMError(
                    f"model {self.model!r} is not served at {', '.join(missing)} "
                    f"(they serve: {known})"
                )
            self.base = self.served_name = parent.get(self.model, self.model)
            return self.model
        common = set.intersection(*bases.values())
        if len(common) != 1:
            what = sorted(common) or "different models"
            raise VLLMError(
                f"cannot tell which model to use at {', '.join(self.urls)}: they "
                f"serve {what}; set WHALE_LLM_MODEL"
            )
        self.base = self.served_name = common.pop()
        return self.base

    async def _launch(self, timeout: float) -> str:
        if not self.python:
            raise VLLMError(
                "no vLLM to launch: set WHALE_VLLM_PYTHON to a python with vLLM "
                "(`bash scripts/vllm-cpu.sh` builds one and prints it), "
                "or WHALE_VLLM_URLS to attach to running servers"
            )
        if self.model_path is None:
            raise VLLMError("no model folder to serve")
        self.server = VLLMServer(
            self.python,
            self.model_path,
            self.log_path,
            max_lora_rank=self.max_lora_rank,
            max_loras=self.max_loras,
            extra_args=self.extra_args,
            max_model_len=self.max_model_len,
            sleep_mode=self.colocate,
            gpus=self.gpus,
            say=self.say,
        )
        self.server.on_restart = self._reload_adapters
        self.say(f"model: starting vLLM for {self.model_path.name} (log: {self.log_path})")
        await asyncio.to_thread(self.server.start, timeout)
        self.urls = [self.server.base_url]
        self.base = self.served_name = self.server.model
        return self.base

    async def load_adapter(self, name: str, path: Path) -> str:
        """Hot-load a LoRA adapter on every replica; requests then select it with model=name.

        Loading the same name again replaces its weights. Raises AdapterError with the reason
        (missing folder, shapes that do not fit the base, or the server's own message)."""
        path = Path(path).absolute()
        if self.server or path.exists():  # a launched server shares this filesystem
            await asyncio.to_thread(check_adapter, path, self.base_model_path)
        body = {"lora_name": name, "lora_path": str(path), "load_inplace": True}
        async with httpx.AsyncClient(timeout=600) as client:
            answers = await asyncio.gather(
                *(self._post(client, url, "load_lora_adapter", body) for url in self.urls)
            )
        refused = [(url, message) for url, message in zip(self.urls, answers) if message]
        if refused:
            loaded = [url for url, message in zip(self.urls, answers) if not message]
            async with httpx.AsyncClient(timeout=60) as client:  # all replicas or none
                for url in loaded:
                    await self._post(client, url, "unload_lora_adapter", {"lora_name": name})
            reasons = "; ".join(f"{message} (at {url})" for url, message in refused)
            raise AdapterError(f"vLLM refused adapter {name!r} from {path}: {reasons}")
        self.adapters[name] = path
        return name

    async def unload_adapter(self, name: str) -> None:
        """Drop an adapter from every replica (no error where it was not loaded)."""
        async with httpx.AsyncClient(timeout=60) as client:
            for url in self.urls:
                await self._post(client, url, "unload_lora_adapter", {"lora_name": name})
        self.adapters.pop(name, None)

    async def serve_weights(self, path: Path) -> str:
        """Serve a full fine-tune's weights folder; returns the name requests use for it (the
        folder). The running servers load the weights in place (`reload_weights` through vLLM's
        `/collective_rpc`, then the prefix cache is cleared), as RL trainers sync weights into
        their engine; where a server cannot (an attached one without VLLM_SERVER_DEV_MODE, an
        older vLLM), the managed server restarts on the folder. Adapters made for the old
        weights are dropped either way."""
        path = Path(path)
        if not (path / "config.json").is_file():
            raise VLLMError(f"weights folder {path} has no config.json: nothing for vLLM to serve")
        for name in list(self.adapters):
            await self.unload_adapter(name)
        why = await self._reload_in_place(path)
        if why is None:
            self.say(f"model: loaded the weights of {path} into vLLM in place")
            self.endpoint.retired.add(self.model)
            self.endpoint.retired.discard(str(path))
            served = self.served_name
            self.endpoint.renamed = {str(path): served} if str(path) != served else {}
            if self.server:  # a crash restart then starts on these weights, under their name
                self.server.set_model_path(path)
        elif self.server is None:
            raise VLLMError(
                f"cannot load new weights into the attached vLLM servers ({why}): restart them "
                f"on {path} and attach again, or start them with VLLM_SERVER_DEV_MODE=1"
            )
        else:
            self.say(f"model: restarting vLLM on {path} (not loaded in place: {why})")
            return await self.restart_on(path)
        return self._now_serving(path)

    async def restart_on(self, path: Path) -> str:
        """Restart the managed server on the weights folder `path` (what serve_weights falls
        back to); returns the name requests use for it, the folder's own."""
        await asyncio.to_thread(self.server.restart, path)
        self._serving_own_name()
        self.endpoint.retired.discard(str(path))
        return self._now_serving(Path(path))

    def _now_serving(self, path: Path) -> str:
        self.model_path = path
        self.model = self.base = str(path)
        self.endpoint.model = self.model
        for replica in self.endpoint.replicas:
            replica.model = self.model
        return self.model

    def _serving_own_name(self) -> None:
        """After a (re)start the server calls its weights by their folder's name: nothing is
        renamed."""
        self.served_name = self.server.model
        if self.endpoint:
            self.endpoint.renamed = {}

    async def batch_capacity(self) -> int | None:
        """The sequences the servers decode at once, summed over replicas: each one's
        `max_num_seqs` (from its /server_info, or from --max-num-seqs among the launch
        arguments); None when a server does not say."""
        total = 0
        async with httpx.AsyncClient(timeout=30) as client:
            for url in self.urls:
                seqs = None
                try:
                    response = await client.get(
                        f"{_root(url)}/server_info", params={"config_format": "json"}
                    )
                    config = response.json()["vllm_config"]["scheduler_config"]
                    seqs = int(config["max_num_seqs"])
                except (httpx.HTTPError, ValueError, KeyError, TypeError):
                    given = flag_value(self.extra_args, "--max-num-seqs") if self.server else None
                    seqs = int(given) if given and given.isdigit() else None
                if seqs is None:
                    return None
                total += seqs
        return total

    async def _reload_in_place(self, path: Path) -> str | None:
        """Load the weights of `path` into every replica; None when done, else why not."""
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
        async with httpx.AsyncClient(timeout=600) as client:
            for url in self.urls:
                root = _root(url)
                for action, body in (("collective_rpc", rpc), ("reset_prefix_cache", None)):
                    try:
                        response = await client.post(f"{root}/{action}", json=body)
                    except httpx.HTTPError as exc:
                        return f"{action} at {root}: no answer: {exc!r}"
                    if response.status_code == 404:
                        return f"{root} has no /{action} (it runs without VLLM_SERVER_DEV_MODE)"
                    if response.status_code != 200:
                        return f"{action} at {root}: {_error_message(response)}"
        return None

    async def restore_base(self) -> None:
        """Load the base weights into the attached servers in place (a rehearsal before this one
        may have left a fine-tune's there). Raises VLLMError."""
        await self.ensure_awake()  # a sleeping server refuses the reload
        why = await self._reload_in_place(self.base_model_path)
        if why is not None:
            raise VLLMError(f"cannot load the base weights back: {why}")

    async def sleep(self) -> None:
        """Free the GPUs for a training step: every replica sleeps at level 1 (weights offloaded
        to CPU memory, KV cache dropped) through `POST /sleep?level=1`, which needs the server
        started with `--enable-sleep-mode` and VLLM_SERVER_DEV_MODE=1 (a launched one has both
        when colocated). A sleeping server refuses requests: none may be in flight.
        All or none: when one replica cannot sleep, those already asleep are woken again."""
        asleep = []
        async with httpx.AsyncClient(timeout=600) as client:
            for url in self.urls:
                why = await self._call(client, url, "sleep", {"level": "1"})
                if why is not None:
                    failed = await self._wake(client, asleep)
                    if failed:
                        self.maybe_asleep = True
                        why += "; waking again those that slept failed: " + "; ".join(failed)
                    elif asleep:
                        why += f"; {', '.join(map(_root, asleep))} woken again"
                    raise VLLMError(why)
                asleep.append(url)

    async def wake_up(self) -> None:
        """After the training step: the weights back on the GPUs, the KV cache reallocated
        (`POST /wake_up`); the new weights are loaded in place after (serve_weights). Every
        replica is asked, whichever fails; a failure names each replica that stays asleep."""
        async with httpx.AsyncClient(timeout=600) as client:
            failed = await self._wake(client, self.urls)
        if failed:
            self.maybe_asleep = True  # ensure_awake tries again before the next sampling
            raise VLLMError("vLLM did not wake: " + "; ".join(failed))

    async def ensure_awake(self) -> None:
        """Wake every replica that says it sleeps (`GET /is_sleeping`), when one may
        (`maybe_asleep`); a server without sleep mode (404) never sleeps. Raises VLLMError
        naming the replicas that stay asleep."""
        async with self._waking:  # the rollouts of an evaluation ask at once: one asks vLLM
            if not self.maybe_asleep:
                return
            async with httpx.AsyncClient(timeout=600) as client:
                asleep = [url for url in self.urls if await self._is_sleeping(client, url)]
                failed = await self._wake(client, asleep)
            if failed:
                raise VLLMError("vLLM is asleep and did not wake: " + "; ".join(failed))
            if asleep:
                self.say(f"model: woke vLLM at {', '.join(map(_root, asleep))} (found asleep)")
            self.maybe_asleep = False

    @staticmethod
    async def _is_sleeping(client: httpx.AsyncClient, url: str) -> bool:
        root = _root(url)
        try:
            response = await client.get(f"{root}/is_sleeping")
        except httpx.HTTPError as exc:
            raise VLLMError(f"is_sleeping at {root}: no answer: {exc!r}") from None
        if response.status_code == 404:  # no sleep mode (or no VLLM_SERVER_DEV_MODE): awake
            return False
        try:
            response.raise_for_status()
            return bool(response.json()["is_sleeping"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            raise VLLMError(f"is_sleeping at {root}: {_error_message(response)}") from None

    async def _wake(self, client: httpx.AsyncClient, urls: list[str]) -> list[str]:
        """Ask each of `urls` to wake, whichever fails; the failures, each naming its replica."""
        failed = []
        for url in urls:
            why = await self._call(client, url, "wake_up", {})
            if why is not None:
                failed.append(why)
        return failed

    @staticmethod
    async def _call(client: httpx.AsyncClient, url: str, action: str, params: dict) -> str | None:
        """POST a sleep-mode call to one replica; None when done, else why not (naming it)."""
        root = _root(url)
        try:
            response = await client.post(f"{root}/{action}", params=params)
        except httpx.HTTPError as exc:
            return f"{action} at {root}: no answer: {exc!r}"
        if response.status_code == 404:
            return (
                f"{root} has no /{action}: colocation needs vLLM started with "
                "--enable-sleep-mode and VLLM_SERVER_DEV_MODE=1"
            )
        if response.status_code != 200:
            return f"{action} at {root}: {_error_message(response)}"
        return None

    async def stop(self) -> None:
        if self.endpoint:
            await self.endpoint.close()
        if self.server:
            await asyncio.to_thread(self.server.stop)

    @staticmethod
    async def _post(client: httpx.AsyncClient, url: str, action: str, body: dict) -> str | None:
        """POST a runtime-adapter call; returns None on success, else the reason."""
        try:
            response = await client.post(f"{url}/{action}", json=body)
        except httpx.HTTPError as exc:
            return f"no answer: {exc!r}"
        if response.status_code == 200:
            return None
        message = _error_message(response)
        if action == "unload_lora_adapter" and response.status_code == 404:
            return None  # already gone
        return message

    def _reload_adapters(self) -> None:
        """After a crash restart: load the adapters again (runs in the watcher thread). The
        server now calls its weights by their own folder's name."""
        self._serving_own_name()
        for name, path in list(self.adapters.items()):
            body = {"lora_name": name, "lora_path": str(path), "load_inplace": True}
            for url in self.urls:
                try:
                    response = httpx.post(f"{url}/load_lora_adapter", json=body, timeout=600)
                    ok, why = response.status_code == 200, _error_message(response)
                except httpx.HTTPError as exc:
                    ok, why = False, repr(exc)
                if not ok:
                    self.say(f"adapter {name!r} could not be reloaded after a restart: {why}")
