"""Whether a plan fits the machine: from the model's config.json and the devices present, the
memory the trainer needs (LoRA or full fine-tune, AdamW), the memory vLLM needs (weights and the
KV cache of one sequence at `vllm_max_model_len`) and the disk retention will hold, compared
with the GPUs, the RAM and the free disk of this machine. `whale run` (and `--dry-run`) and the
web's start form show it; a plan that cannot run is refused before anything starts, naming what
to set (docs/gpu-hosts.md, "A plan checked against the machine").

The figures are estimates: weights, gradients and AdamW's state are counted exactly from the
parameter count (itself exact when the weights' safetensors headers are at hand, else computed
from the config, vision towers left out), activations only roughly (within a factor of two).
"""

import json
import math
import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1 << 30
FULL_FT_CPU_LIMIT = 1e9  # parameters: a full fine-tune past this on a CPU takes days per step
VLLM_GPU_SHARE = 0.9  # vLLM's default --gpu-memory-utilization
ACTIVATIONS = "activations at most (rough)"
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass
class ModelShape:
    """What the estimates need from a model's config."""

    params: int
    hidden: int
    layers: int
    kv_layers: int  # layers with a KV cache (a hybrid model's linear-attention layers have none)
    kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int  # bytes per value vLLM serves it in
    source: str  # the config's path, or "weights" when the count came from the safetensors


def shape_of(config: dict, source: str = "config.json") -> ModelShape:
    """The shape in a config.json (a multimodal model's text part: `text_config`)."""
    text = config.get("text_config") or config
    hidden, layers = text["hidden_size"], text["num_hidden_layers"]
    heads = text.get("num_attention_heads", 1)
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or hidden // heads
    vocab = text.get("vocab_size") or config.get("vocab_size")
    inter = text.get("intermediate_size") or 4 * hidden
    kinds = text.get("layer_types")
    if kinds:
        kv_layers = sum(k == "full_attention" for k in kinds)
    elif text.get("full_attention_interval"):
        kv_layers = layers // text["full_attention_interval"]
    else:
        kv_layers = layers
    # per layer: attention (q, o: heads x head_dim; k, v: kv_heads x head_dim), a gated MLP;
    # a linear-attention layer is counted as an attention layer (close for Qwen3.5's)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    per_layer = attention + 3 * hidden * inter + 2 * hidden
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    params = layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden
    dtype = text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype") or "float32"
    return ModelShape(
        params=params,
        hidden=hidden,
        layers=layers,
        kv_layers=kv_layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        # vLLM's "auto" dtype serves a float32 checkpoint in bfloat16
        dtype_bytes=min(DTYPE_BYTES.get(str(dtype), 2), 2),
        source=source,
    )


def _weights_params(folder: Path) -> int | None:
    """The parameter count in the folder's safetensors headers (no weights read), if any."""
    from app.llm.vllm import _tensor_shapes

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    shapes = {}
    for file in files:
        shapes.update(_tensor_shapes(file))
    return sum(math.prod(s) for s in shapes.values())


def config_path(model: str | None) -> Path | None:
    """The config.json of a weights folder, or of a hub id in the local Hugging Face cache."""
    if not model:
        return None
    if Path(model).is_dir():
        found = Path(model) / "config.json"
        return found if found.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # not a hub id either: a served name of an attached server
        return None
    return Path(cached) if isinstance(cached, str) else None


def read_shape(model: str | None) -> ModelShape | None:
    """The shape of the model named (folder or hub id), None where no config.json is at hand."""
    path = config_path(model)
    if path is None:
        return None
    try:
        shape = shape_of(json.loads(path.read_text()), str(path))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    exact = _weights_params(path.parent)
    if exact:
        shape.params, shape.source = exact, f"{path.parent} (weights)"
    return shape


# --- the machine -------------------------------------------------------------------------


@dataclass
class Machine:
    """The devices present: GPU memory per device (bytes), RAM available, the store's free disk."""

    gpus: list[int] = field(default_factory=list)
    ram: int = 0
    disk_free: int = 0
    disk_path: str = ""


def this_machine(home: Path) -> Machine:
    gpus = []
    if not Path("/proc/driver/nvidia/gpus").is_dir():  # no NVIDIA driver: torch not imported
        return _with_host(gpus, home)
    try:
        import torch

        if torch.cuda.is_available():
            gpus = [
                torch.cuda.get_device_properties(i).total_memory
                for i in range(torch.cuda.device_count())
            ]
    except Exception:  # a broken CUDA install: no GPU to count on
        gpus = []
    return _with_host(gpus, home)


def _available_ram() -> int:
    """Bytes of RAM available (MemAvailable: free plus what the page cache would give back)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _with_host(gpus: list[int], home: Path) -> Machine:
    ram = _available_ram()
    existing = Path(home)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return Machine(gpus, ram, shutil.disk_usage(existing).free, str(existing))


# --- the estimates -----------------------------------------------------------------------


def trainer_memory(shape: ModelShape, rft, rows: int, seq: int, shards: int = 1) -> dict[str, int]:
    """Bytes per training process: the trainer holds the model in float32; a full fine-tune adds
    its gradients and AdamW's two moments (sharded over `shards` FSDP processes); LoRA adds
    those only for the adapter. Activations of `rows` sequences of `seq` tokens in one forward
    pass (no activation checkpointing), the float32 logits included: rough, and a bound, since
    few examples are as long as the longest allowed."""
    trained = shape.params if not rft.lora else _lora_params(shape, rft)
    return {
        "weights": 4 * shape.params // (shards if not rft.lora else 1),
        "gradients": 4 * trained // shards,
        "AdamW state": 8 * trained // shards,
        ACTIVATIONS: rows * seq * (shape.layers * shape.hidden * 4 * 16 + shape.vocab * 4 * 2),
    }


def _lora_params(shape: ModelShape, rft) -> int:
    """Rank-r A and B for each target module of each layer (each taken as hidden x hidden)."""
    return shape.layers * len(rft.lora_targets) * 2 * rft.lora_rank * shape.hidden


def vllm_memory(shape: ModelShape, max_model_len: int) -> dict[str, int]:
    """Bytes vLLM needs at the least: its weights, and the KV cache of one whole sequence."""
    kv = 2 * shape.kv_layers * shape.kv_heads * shape.head_dim * shape.dtype_bytes * max_model_len
    return {"weights": shape.params * shape.dtype_bytes, "KV cache, one sequence": kv}


def retention_disk(shape: ModelShape, experiment) -> tuple[int, str]:
    """Bytes of $WHALE_HOME/checkpoints at the run's end, and how they were counted: a full
    fine-tune's checkpoint is its float32 weights, a carried AdamW state adds one copy of twice
    them; retention keeps keep_last, every keep_every-th, and one per weight phase."""
    rft, budget, switching = experiment.rft, experiment.budget, experiment.switching
    steps = budget.weight_steps
    per = 4 * (shape.params if not rft.lora else _lora_params(shape, rft))
    optimizer = 8 * shape.params if not rft.lora and rft.optimizer_state != "step" else 0
    if steps is None:
        return per + optimizer, "for one kept checkpoint; the run's length is open"
    phases = -(-steps // switching.weight_steps_per_phase)
    if rft.keep_last or rft.keep_every:
        kept = (rft.keep_last or 0) + (steps // rft.keep_every if rft.keep_every else 0) + phases
        kept = min(kept, steps)
    else:
        kept = steps
    total = kept * per + optimizer
    how = f"{kept} of {steps} checkpoints kept"
    if rft.max_disk_gb is not None and total > rft.max_disk_gb * 1e9:
        total, how = int(rft.max_disk_gb * 1e9), f"rft.max_disk_gb caps it ({how} otherwise)"
    return total, how


# --- where each part runs ------------------------------------------------------------------


@dataclass
class Placement:
    trainer: str  # "cpu" or "gpu"
    trainer_gpus: list[int]
    trainer_processes: int
    sharded: bool  # FSDP / DeepSpeed: weights and optimizer split over the processes
    vllm: str  # "gpu", "cpu", "attached" (elsewhere), or "none" (another backend)
    vllm_gpus: list[int]
    why_trainer: str


def _accelerate(settings) -> tuple[int, bool, bool]:
    """(processes, sharded, use_cpu) of the accelerate launch the trainer runs under."""
    config = {}
    if settings.train_accelerate_config:
        import yaml

        try:
            config = yaml.safe_load(Path(settings.train_accelerate_config).read_text()) or {}
        except (OSError, yaml.YAMLError):
            config = {}
    args = shlex.split(settings.train_accelerate_args or "")
    processes = config.get("num_processes", 1)
    if "--num_processes" in args:
        processes = int(args[args.index("--num_processes") + 1])
    sharded = config.get("distributed_type") in ("FSDP", "DEEPSPEED") or "--use_fsdp" in args
    return max(int(processes), 1), sharded, bool(config.get("use_cpu")) or "--cpu" in args


def gpu_list(text: str | None, count: int) -> list[int]:
    """Device ids in "0,1,2" (or every device when unset)."""
    if not text:
        return list(range(count))
    return [int(i) for i in text.split(",") if i.strip()]


def placement(settings, machine: Machine) -> Placement:
    """Where the trainer and the model server run, as app/training/train.py and the workbench
    place them: a plain training process trains on the CPU; under `accelerate launch` on the
    GPUs left to it (WHALE_VLLM_GPUS takes vLLM's, the trainer gets the rest)."""
    n = len(machine.gpus)
    processes, sharded, use_cpu = _accelerate(settings)
    launched = settings.train_accelerate_config or settings.train_accelerate_args
    vllm_gpus = gpu_list(settings.vllm_gpus, n) if n else []
    if settings.backend != "vllm":
        vllm = "none"
    elif settings.vllm_urls:
        vllm = "attached"
    else:
        vllm = "gpu" if n else "cpu"
    if not launched:
        trainer, gpus, why = "cpu", [], "a plain training process trains on the CPU"
    elif use_cpu or not n:
        trainer, gpus, why = (
            "cpu",
            [],
            "no GPU here" if not n else "the accelerate config's use_cpu",
        )
    else:
        split = settings.vllm_gpus and vllm == "gpu"
        gpus = [i for i in range(n) if i not in vllm_gpus] if split else list(range(n))
        trainer, why = "gpu", f"accelerate launch on GPUs {_ids(gpus)}"
    return Placement(trainer, gpus, processes, sharded, vllm, vllm_gpus, why)


def _ids(gpus: list[int]) -> str:
    return ",".join(map(str, gpus)) or "none"


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"


# --- the check ------------------------------------------------------------------------------


@dataclass
class Fit:
    """What the plan needs against what the machine has: lines to show, and refusals (each
    says what to set). `whale run --force` runs a refused plan anyway."""

    lines: list[str]
    refusals: list[str]

    def as_dict(self) -> dict:
        return {"lines": self.lines, "refusals": self.refusals}


def served_model(settings) -> str | None:
    """The weights the plan serves and trains: WHALE_LLM_MODEL, else the demo model's folder."""
    if settings.llm_model:
        return settings.llm_model
    from app.llm.local import MODEL_NAME

    return str(settings.models_dir / MODEL_NAME)


def check(experiment, settings, machine: Machine | None = None, shape=False) -> Fit:
    """The plan of `experiment` under `settings` against `machine` (default: this one), for the
    model's `shape` (default: read from its config.json)."""
    machine = machine or this_machine(settings.home)
    model = served_model(settings)
    shape = read_shape(model) if shape is False else shape
    place = placement(settings, machine)
    lines, refusals = [], []
    gpus = f"{len(machine.gpus)} GPUs of {_gib(max(machine.gpus))}" if machine.gpus else "no GPU"
    lines.append(
        f"machine: {gpus}, {_gib(machine.ram)} RAM free, {_gib(machine.disk_free)} disk free "
        f"at {machine.disk_path}"
    )
    if shape is None:
        lines.append(f"model: no config.json found for {model}: memory and disk not estimated")
    else:
        lines.append(
            f"model: {shape.params / 1e9:.2f}B parameters, {shape.layers} layers "
            f"({shape.kv_layers} with a KV cache), vocab {shape.vocab:,} (from {shape.source})"
        )
        _check_vllm(shape, settings, place, machine, lines, refusals)
        _check_trainer(shape, experiment, settings, place, machine, lines, refusals)
        disk, how = retention_disk(shape, experiment)
        lines.append(f"disk: checkpoints ≈ {_gib(disk)} ({how})")
        if disk > machine.disk_free:
            refusals.append(
                f"the checkpoints need ≈ {_gib(disk)} ({how}), {machine.disk_path} has "
                f"{_gib(machine.disk_free)} free: set [rft] keep_last, keep_every or max_disk_gb"
            )
    shared = set(place.trainer_gpus) & set(place.vllm_gpus)
    if place.vllm == "gpu" and place.trainer == "gpu" and shared and not settings.colocate:
        refusals.append(
            f"vLLM and the trainer would share GPUs {_ids(sorted(shared))}, and vLLM holds "
            f"{VLLM_GPU_SHARE:.0%} of their memory: give vLLM its own (WHALE_VLLM_GPUS=0,1: "
            "the trainer gets the others) or set [runtime] colocate = true (vLLM sleeps while "
            "the trainer trains)"
        )
    return Fit(lines, refusals)


def _check_vllm(shape, settings, place, machine, lines, refusals) -> None:
    if place.vllm in ("none", "attached"):
        lines.append(
            "vLLM: attached servers, not on this machine"
            if place.vllm == "attached"
            else f"model server: the {settings.backend_name} backend"
        )
        return
    from app.llm.vllm import flag_value

    args = shlex.split(settings.vllm_args or "")
    length = settings.vllm_max_model_len or int(flag_value(args, "--max-model-len") or 0)
    parts = vllm_memory(shape, length or 0)
    need = sum(parts.values())
    tp = int(flag_value(args, "--tensor-parallel-size") or 1)
    if place.vllm == "cpu":  # weights in RAM, the KV cache a fixed size (app/llm/vllm.py)
        have, where = machine.ram, "RAM; the KV cache is 1 GiB on vLLM's CPU build"
        fits = parts["KV cache, one sequence"] <= GIB and parts["weights"] <= have
    else:
        gpus = [machine.gpus[i] for i in place.vllm_gpus[:tp] if i < len(machine.gpus)]
        have = int(VLLM_GPU_SHARE * min(gpus or [0])) * max(len(gpus), 1)
        where = f"{VLLM_GPU_SHARE:.0%} of GPUs {_ids(place.vllm_gpus[:tp])}"
        fits = need <= have
    at = f"at max_model_len {length}" if length else "(KV cache at vLLM's default length)"
    lines.append(f"vLLM: ≈ {_gib(need)} {at}: {_describe(parts)}; has {_gib(have)} ({where})")
    if length and not fits:
        refusals.append(
            f"vLLM needs ≈ {_gib(need)} (weights and one sequence of {length} tokens), it has "
            f"{_gib(have)} ({where}): lower [runtime] vllm_max_model_len, or give it more GPUs "
            "(--tensor-parallel-size in WHALE_VLLM_ARGS)"
        )


def _check_trainer(shape, experiment, settings, place, machine, lines, refusals) -> None:
    """The trainer's line; a refusal when its weights, gradients and AdamW state (exact) do not
    fit, a warning line when the longest forward pass allowed (a bound) would not."""
    rft = experiment.rft
    shards = place.trainer_processes if place.sharded else 1
    # a "rollout" mini-batch holds every call of batch_size rollouts: all in one forward pass
    # unless micro_batch_size splits it
    calls = (
        (experiment.rollout.max_calls or settings.rollout_max_calls)
        if rft.batch_unit == "rollout"
        else 1
    )
    rows = rft.micro_batch_size or -(-rft.batch_size * calls // place.trainer_processes)
    seq = rft.max_seq_len or experiment.rollout.max_tokens or settings.rollout_max_tokens
    parts = trainer_memory(shape, rft, rows, seq, shards)
    static = sum(v for k, v in parts.items() if k != ACTIVATIONS)
    kind = "LoRA" if rft.lora else "full fine-tune"
    if place.trainer == "cpu":
        have, where = machine.ram, "RAM"
    else:
        have = min(machine.gpus[i] for i in place.trainer_gpus)
        where = f"GPU {_ids(place.trainer_gpus)}, each"
        if settings.colocate:  # vLLM sleeps (level 1): weights to RAM, KV cache freed
            where += ", vLLM asleep while it trains"
    lines.append(
        f"trainer ({kind}; {place.why_trainer}; up to {rows} rows of {seq} tokens per forward "
        f"pass): ≈ {_gib(static)} per process and up to {_gib(parts[ACTIVATIONS])} more: "
        f"{_describe(parts)}; has {_gib(have)} ({where})"
    )
    if not rft.lora and shape.params > FULL_FT_CPU_LIMIT and place.trainer == "cpu":
        refusals.append(
            f"a full fine-tune of a {shape.params / 1e9:.1f}B-parameter model would train on the "
            f"CPU ({place.why_trainer}): on a GPU host set WHALE_TRAIN_ACCELERATE_CONFIG="
            "configs/accelerate/fsdp.yaml (docs/gpu-hosts.md), or set [rft] lora = true"
        )
    elif static > have:
        refusals.append(
            f"the trainer needs ≈ {_gib(static)} per process before any activation "
            f"({_describe(parts)}), the {where} has {_gib(have)}: set [rft] lora = true, "
            "or train on more GPUs under FSDP (WHALE_TRAIN_ACCELERATE_CONFIG)"
        )
    elif static + parts[ACTIVATIONS] > have:
        per_row = parts[ACTIVATIONS] // rows
        fit_rows = (have - static) // per_row
        fix = (
            f"set [rft] micro_batch_size = {fit_rows} if training runs out of memory"
            if fit_rows >= 1
            else "set a shorter [rft] max_seq_len if training runs out of memory"
        )
        lines.append(
            f"warning: {rows} rows of the longest allowed length would not fit the {where}: {fix}"
        )


def _describe(parts: dict[str, int]) -> str:
    return ", ".join(f"{name} {_gib(n)}" for name, n in parts.items())
