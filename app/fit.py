"""Whether a plan fits the machine: from the model's config.json and the devices present, the
memory the trainer needs (LoRA or full fine-tune, AdamW, as its sharding splits it), the memory
vLLM needs (weights and the KV cache of one sequence at `vllm_max_model_len`, else the model's
max_position_embeddings, vLLM's default) and the disk retention will hold, compared with the
GPUs, the RAM and the free disk of this machine, and where each part runs. `whale run` (and
`--dry-run`) and the web's start form show it; a plan that cannot run is refused before
anything starts, naming what to set (docs/gpu-hosts.md, "A plan checked against the machine").

The figures are estimates: weights, gradients and AdamW's state are counted exactly from the
parameter count (itself exact when the weights' safetensors headers are at hand, else computed
from the config, vision towers left out, mixtures of experts counted where their layout is
known, else not estimated), activations only roughly (within a factor of two).
"""

import json
import math
import os
import shlex
import shutil
import struct
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

    params: int | None  # None: a config this module cannot count (`uncounted` says why)
    hidden: int
    layers: int
    kv_layers: int  # layers with a KV cache (a hybrid model's linear-attention layers have none)
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int  # bytes per value vLLM serves it in
    source: str  # the config's path, or "weights" when the count came from the safetensors
    max_positions: int | None = None  # max_position_embeddings: vLLM's default max_model_len
    uncounted: str = ""


# mixture-of-experts configs whose layout is counted exactly here: a router and N experts (each
# a gated MLP) per sparse layer, an optional shared expert with its gate; any other MoE config
# (DeepSeek's latent attention, interleaved layouts, ...) is not estimated from its config
COUNTED_MOE = {"mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next"}
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")


def shape_of(config: dict, source: str = "config.json") -> ModelShape:
    """The shape in a config.json (a multimodal model's text part: `text_config`)."""
    text = config.get("text_config") or config
    hidden, layers = text["hidden_size"], text["num_hidden_layers"]
    heads = text.get("num_attention_heads", 1)
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or hidden // heads
    vocab = text.get("vocab_size") or config.get("vocab_size")
    kinds = text.get("layer_types")
    if kinds:
        kv_layers = sum(k == "full_attention" for k in kinds)
    elif text.get("full_attention_interval"):
        kv_layers = layers // text["full_attention_interval"]
    else:
        kv_layers = layers
    # per layer: attention (q, o: heads x head_dim; k, v: kv_heads x head_dim), its MLPs, two
    # norms; a linear-attention layer is counted as an attention layer (close for Qwen3.5's)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    mlps, uncounted = _mlp_params(text, hidden, layers)
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    params = layers * (attention + 2 * hidden) + mlps + vocab * hidden * (1 if tied else 2) + hidden
    dtype = text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype") or "float32"
    return ModelShape(
        params=None if uncounted else params,
        hidden=hidden,
        layers=layers,
        kv_layers=kv_layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        # vLLM's "auto" dtype serves a float32 checkpoint in bfloat16
        dtype_bytes=min(DTYPE_BYTES.get(str(dtype), 2), 2),
        source=source,
        max_positions=text.get("max_position_embeddings") or config.get("max_position_embeddings"),
        uncounted=uncounted,
    )


def _mlp_params(text: dict, hidden: int, layers: int) -> tuple[int, str]:
    """The parameters of every layer's MLP (gated: 3 x hidden x intermediate), or 0 and why
    they cannot be counted (a mixture-of-experts layout not known here)."""
    dense = 3 * hidden * (text.get("intermediate_size") or 4 * hidden)
    if not any(text.get(key) for key in MOE_KEYS):
        return layers * dense, ""
    kind = text.get("model_type", "unnamed")
    experts = text.get("num_local_experts") or text.get("num_experts")
    if kind not in COUNTED_MOE or not experts:
        return 0, f"a mixture-of-experts config (model_type {kind}) not counted here"
    expert = 3 * hidden * (text.get("moe_intermediate_size") or text["intermediate_size"])
    sparse = experts * expert + hidden * experts  # the experts and their router
    if text.get("shared_expert_intermediate_size"):  # one shared expert, gated by hidden x 1
        sparse += 3 * hidden * text["shared_expert_intermediate_size"] + hidden
    # Qwen's MoE: layer i is sparse when (i + 1) % decoder_sparse_step == 0, unless listed dense
    step, dense_layers = (
        text.get("decoder_sparse_step") or 1,
        set(text.get("mlp_only_layers") or []),
    )
    sparse_layers = [i for i in range(layers) if (i + 1) % step == 0 and i not in dense_layers]
    return len(sparse_layers) * sparse + (layers - len(sparse_layers)) * dense, ""


def _weights_params(folder: Path) -> int | None:
    """The parameter count in the folder's safetensors headers (no weights read), if any: the
    files model.safetensors.index.json names when there is one (a folder may also hold another
    copy, e.g. Mistral's consolidated.safetensors beside the Hugging Face shards)."""
    from app.llm.vllm import _tensor_shapes

    index = folder / "model.safetensors.index.json"
    try:
        named = json.loads(index.read_text())["weight_map"].values() if index.is_file() else []
        files = sorted({folder / name for name in named})
    except (OSError, ValueError, KeyError, AttributeError):
        files = []
    if not files:
        files = sorted(folder.glob("*.safetensors"))
        hub = [f for f in files if not f.name.startswith("consolidated")]
        files = hub or files
    shapes = {}
    try:
        for file in files:
            shapes.update(_tensor_shapes(file))
    except (OSError, ValueError, struct.error):
        return None
    return sum(math.prod(s) for s in shapes.values()) or None


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
        shape.params, shape.source, shape.uncounted = exact, f"{path.parent} (weights)", ""
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


# what each sharding strategy splits over its processes (the rest each process holds whole):
# FSDP and ZeRO-3 shard parameters (a LoRA's frozen base weights too), ZeRO-2 gradients and
# optimizer state, ZeRO-1 the optimizer state alone
PARTS = ("weights", "gradients", "AdamW state")
SHARDED = {"FSDP": PARTS, "ZeRO-3": PARTS, "ZeRO-2": PARTS[1:], "ZeRO-1": PARTS[2:]}


def trainer_memory(
    shape: ModelShape, rft, rows: int, seq: int, processes: int = 1, sharding: str | None = None
) -> dict[str, int]:
    """Bytes per training process: the trainer holds the model in float32; a full fine-tune adds
    its gradients and AdamW's two moments; LoRA adds those only for the adapter; `sharding`
    (SHARDED) splits some of them over the `processes`. Activations of `rows` sequences of
    `seq` tokens in one forward pass (no activation checkpointing), the float32 logits
    included: rough, and a bound, since few examples are as long as the longest allowed."""
    trained = shape.params if not rft.lora else _lora_params(shape, rft)
    whole = {"weights": 4 * shape.params, "gradients": 4 * trained, "AdamW state": 8 * trained}
    split = SHARDED.get(sharding, ())
    parts = {k: v // processes if k in split else v for k, v in whole.items()}
    parts[ACTIVATIONS] = rows * seq * (shape.layers * shape.hidden * 4 * 16 + shape.vocab * 4 * 2)
    return parts


def _lora_params(shape: ModelShape, rft) -> int:
    """Rank-r A and B for each target module of each layer (each taken as hidden x hidden)."""
    return shape.layers * len(rft.lora_targets) * 2 * rft.lora_rank * shape.hidden


def vllm_memory(shape: ModelShape, max_model_len: int) -> dict[str, int]:
    """Bytes vLLM needs at the least: its weights, and the KV cache of one whole sequence."""
    kv = 2 * shape.kv_layers * shape.kv_heads * shape.head_dim * shape.dtype_bytes * max_model_len
    return {"weights": shape.params * shape.dtype_bytes, "KV cache, one sequence": kv}


def retention_disk(shape: ModelShape, experiment, sharded: bool = False) -> tuple[int, str]:
    """Bytes of $WHALE_HOME/checkpoints at the run's end, and how they were counted, as
    app/training/retention.py keeps them: a checkpoint is its float32 weights (a LoRA's: the
    adapter); a carried optimizer (optimizer_state "phase" or "run", not under FSDP or
    DeepSpeed) adds AdamW's state, twice them, to each. With no retention setting every
    checkpoint keeps both; with any, only the newest keeps its optimizer state, and keep_last,
    every keep_every-th and one per weight phase keep their weights (with max_disk_gb alone,
    all until the budget drops the oldest)."""
    rft, budget, switching = experiment.rft, experiment.budget, experiment.switching
    steps = budget.weight_steps
    per = 4 * (shape.params if not rft.lora else _lora_params(shape, rft))
    optimizer = 2 * per if rft.optimizer_state != "step" and not sharded else 0
    if steps is None:
        return per + optimizer, "for one kept checkpoint; the run's length is open"
    phases = -(-steps // switching.weight_steps_per_phase)
    if rft.keep_last or rft.keep_every:
        kept = (rft.keep_last or 0) + (steps // rft.keep_every if rft.keep_every else 0) + phases
        kept = min(kept, steps)
    else:
        kept = steps
    policy = rft.keep_last or rft.keep_every or rft.max_disk_gb is not None
    optimizers = (1 if policy else kept) if optimizer else 0
    total = kept * per + optimizers * optimizer
    how = f"{kept} of {steps} checkpoints kept"
    if optimizers:
        how += f", {optimizers} with its optimizer state"
    if rft.max_disk_gb is not None and total > rft.max_disk_gb * 1e9:
        total, how = int(rft.max_disk_gb * 1e9), f"rft.max_disk_gb caps it ({how} otherwise)"
    return total, how


# --- where each part runs ------------------------------------------------------------------


@dataclass
class Launch:
    """The `accelerate launch` the trainer runs under, as far as the estimates need it."""

    processes: int | None  # on this machine; None: one per GPU it sees (accelerate's default)
    sharding: str | None  # a key of SHARDED, or None (each process holds everything)
    cpu: str  # why it trains on the CPU even where a GPU is visible ("": it does not)
    set_in: str  # where num_processes is set ("{}": the number), for a refusal to name
    machines: int = 1  # num_processes counts the processes of every machine


@dataclass
class Placement:
    trainer: str  # "cpu" or "gpu"
    trainer_gpus: list[int]
    trainer_processes: int
    vllm: str  # "gpu", "cpu", "attached" (elsewhere), or "none" (another backend)
    vllm_gpus: list[int]
    why_trainer: str
    launch: Launch  # of a plain training process: one, nothing sharded


def launch_flags(text: str | None) -> dict[str, str | bool]:
    """accelerate launch's options in `text`: "--num_processes 4", "--num-processes=4" and
    "--use_fsdp" alike, by their underscore name (a flag without a value: True)."""
    tokens, flags = shlex.split(text or ""), {}
    for i, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        name, eq, value = token[2:].partition("=")
        following = tokens[i + 1] if i + 1 < len(tokens) else "--"
        flags[name.replace("-", "_")] = value if eq else (following.startswith("--") or following)
    return flags


def _number(value, default: int | None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _yaml(path) -> dict:
    import yaml

    try:
        loaded = yaml.safe_load(Path(path).read_text()) if path else {}
    except (OSError, yaml.YAMLError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _zero_stage(flags: dict, deepspeed: dict) -> int:
    """The ZeRO stage: --zero_stage, the config's zero_stage, or its deepspeed_config_file's
    zero_optimization.stage (JSON or YAML); accelerate's default 2."""
    stage = flags.get("zero_stage", deepspeed.get("zero_stage"))
    file = flags.get("deepspeed_config_file") or deepspeed.get("deepspeed_config_file")
    if stage is None and isinstance(file, str):
        stage = (_yaml(file).get("zero_optimization") or {}).get("stage")  # YAML reads JSON
    return _number(stage, 2)


def accelerate_launch(settings) -> Launch:
    """The launch of WHALE_TRAIN_ACCELERATE_CONFIG with WHALE_TRAIN_ACCELERATE_ARGS (which win),
    read as accelerate reads them: `use_cpu` of a config holds only for a single process
    (accelerate's multi-process launchers do not pass it on: there the processes take the GPUs
    they see, app/training/train.py's on_cpu); `--cpu` starts one process on the CPU."""
    config = _yaml(settings.train_accelerate_config)
    flags = launch_flags(settings.train_accelerate_args)
    kind = config.get("distributed_type")
    for flag, name in (
        ("use_fsdp", "FSDP"),
        ("use_deepspeed", "DEEPSPEED"),
        ("multi_gpu", "MULTI_GPU"),
    ):
        if flags.get(flag):
            kind = name
            break
    sharding = {"FSDP": "FSDP", "DEEPSPEED": "DEEPSPEED"}.get(kind)
    if sharding == "DEEPSPEED":
        stage = _zero_stage(flags, config.get("deepspeed_config") or {})
        sharding = f"ZeRO-{stage}" if stage in (1, 2, 3) else None
    if "num_processes" in flags:
        total = _number(flags["num_processes"], None)
        set_in = "--num_processes {} in WHALE_TRAIN_ACCELERATE_ARGS"
    else:
        total = _number(config.get("num_processes"), None)
        set_in = f"num_processes = {{}} in {settings.train_accelerate_config}"
    machines = max(_number(flags.get("num_machines", config.get("num_machines")), 1) or 1, 1)
    processes = -(-total // machines) if total and total > 0 else None
    if flags.get("cpu"):
        return Launch(1, None, "--cpu in WHALE_TRAIN_ACCELERATE_ARGS", set_in, machines)
    single = processes == 1 or (kind in (None, "NO") and processes is None)
    cpu = (
        "the accelerate config's use_cpu (one process)" if config.get("use_cpu") and single else ""
    )
    return Launch(processes, sharding, cpu, set_in, machines)


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
    launch = accelerate_launch(settings)
    launched = settings.train_accelerate_config or settings.train_accelerate_args
    try:
        vllm_gpus = gpu_list(settings.vllm_gpus, n) if n else []
    except ValueError:  # not ids ("0,1"): refused by _check_split
        vllm_gpus = []
    if settings.backend != "vllm":
        vllm = "none"
    elif settings.vllm_urls:
        vllm = "attached"
    else:
        vllm = "gpu" if n else "cpu"
    gpus = []
    if not launched:
        trainer, why = "cpu", "a plain training process trains on the CPU"
    elif launch.cpu or not n:
        trainer, why = "cpu", launch.cpu or "no GPU here"
    else:
        split = settings.vllm_gpus and vllm == "gpu"
        gpus = [i for i in range(n) if i not in vllm_gpus] if split else list(range(n))
        trainer, why = "gpu", f"accelerate launch on GPUs {_ids(gpus)}"
    # accelerate's default: a process per GPU it sees (on the CPU: one)
    processes = (launch.processes or len(gpus) or 1) if launched else 1
    return Placement(trainer, gpus, processes, vllm, vllm_gpus, why, launch)


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
    elif shape.params is None:
        lines.append(
            f"model: parameters not estimated: {shape.uncounted} (from {shape.source}; the "
            "weights' safetensors beside it give the exact count): memory and disk not estimated"
        )
    else:
        lines.append(
            f"model: {shape.params / 1e9:.2f}B parameters, {shape.layers} layers "
            f"({shape.kv_layers} with a KV cache), vocab {shape.vocab:,} (from {shape.source})"
        )
        _check_vllm(shape, settings, place, machine, lines, refusals)
        _check_trainer(shape, experiment, settings, place, machine, lines, refusals)
        disk, how = retention_disk(shape, experiment, sharded=bool(place.launch.sharding))
        lines.append(f"disk: checkpoints ≈ {_gib(disk)} ({how})")
        if disk > machine.disk_free:
            refusals.append(
                f"the checkpoints need ≈ {_gib(disk)} ({how}), {machine.disk_path} has "
                f"{_gib(machine.disk_free)} free: set [rft] keep_last, keep_every or max_disk_gb"
            )
    _check_split(place, settings, machine, refusals)
    micro = experiment.rft.micro_batch_size
    if micro and (place.launch.sharding or "").startswith("ZeRO"):  # app/training/train.py
        refusals.append(
            f"[rft] micro_batch_size = {micro} is not supported under DeepSpeed (accelerate "
            "steps its engine at every backward pass): unset it, or train under FSDP "
            "(WHALE_TRAIN_ACCELERATE_CONFIG=configs/accelerate/fsdp.yaml)"
        )
    return Fit(lines, refusals)


def _check_split(place, settings, machine, refusals) -> None:
    """Refusals for the GPUs of one host: vLLM's named ones present, some left to the trainer,
    no more training processes than those, and vLLM and the trainer apart unless colocated."""
    n = len(machine.gpus)
    if place.vllm == "gpu" and settings.vllm_gpus:
        absent = [i for i in place.vllm_gpus if not 0 <= i < n]
        if not place.vllm_gpus:
            refusals.append(
                f"WHALE_VLLM_GPUS={settings.vllm_gpus} is not a list of GPU ids: set it as "
                f"WHALE_VLLM_GPUS=0,1 (ids of this machine's GPUs, 0 to {n - 1})"
            )
        elif absent:
            refusals.append(
                f"WHALE_VLLM_GPUS={settings.vllm_gpus} names GPU {_ids(absent)}, which this "
                f"machine lacks (it has GPUs {_ids(list(range(n)))}): name GPUs it has"
            )
    if place.trainer != "gpu":
        return
    gpus, processes = len(place.trainer_gpus), place.trainer_processes
    if not gpus:
        fewer = _ids(place.vllm_gpus[:-1]) if len(place.vllm_gpus) > 1 else ""
        refusals.append(
            f"WHALE_VLLM_GPUS={settings.vllm_gpus} gives vLLM every GPU of this machine: no GPU "
            "is left to the trainer: "
            + (f"set WHALE_VLLM_GPUS={fewer} (the trainer gets the others), or " if fewer else "")
            + "unset WHALE_VLLM_GPUS and set [runtime] colocate = true (vLLM sleeps while the "
            "trainer trains on the same GPUs)"
        )
    elif processes > gpus:
        fixes = [f"set {place.launch.set_in.format(gpus * place.launch.machines)}"]
        split = settings.vllm_gpus and place.vllm == "gpu"
        if split and processes < n:
            fixes.append(
                f"WHALE_VLLM_GPUS={_ids(list(range(n - processes)))} (the trainer gets the "
                f"other {processes})"
            )
        elif split and processes == n:
            fixes.append("unset WHALE_VLLM_GPUS and set [runtime] colocate = true")
        refusals.append(
            f"accelerate would start {processes} training processes on this machine and the "
            f"trainer has {gpus} GPUs ({_ids(place.trainer_gpus)}): the processes past them fail "
            f"at the first training step: {', or '.join(fixes)}"
        )
    shared = set(place.trainer_gpus) & set(place.vllm_gpus)
    if place.vllm == "gpu" and shared and not settings.colocate:
        refusals.append(
            f"vLLM and the trainer would share GPUs {_ids(sorted(shared))}, and vLLM holds "
            f"{VLLM_GPU_SHARE:.0%} of their memory: give vLLM its own (WHALE_VLLM_GPUS=0,1: "
            "the trainer gets the others) or set [runtime] colocate = true (vLLM sleeps while "
            "the trainer trains)"
        )


def _check_vllm(shape, settings, place, machine, lines, refusals) -> None:
    """vLLM's line; a refusal when its weights and one whole sequence (at vllm_max_model_len,
    else the model's max_position_embeddings, vLLM's default) do not fit where it runs."""
    if place.vllm in ("none", "attached"):
        lines.append(
            "vLLM: attached servers, not on this machine"
            if place.vllm == "attached"
            else f"model server: the {settings.backend_name} backend"
        )
        return
    from app.llm.vllm import flag_value

    args = shlex.split(settings.vllm_args or "")
    length = settings.vllm_max_model_len or _number(flag_value(args, "--max-model-len"), 0)
    at = f"at max_model_len {length}"
    if not length and shape.max_positions:
        length = shape.max_positions
        at = f"at the model's max_position_embeddings {length} (vLLM's default max_model_len)"
    parts = vllm_memory(shape, length or 0)
    need, weights, kv = sum(parts.values()), parts["weights"], parts["KV cache, one sequence"]
    tp = _number(flag_value(args, "--tensor-parallel-size"), 1) or 1
    if place.vllm == "cpu":  # weights in RAM, the KV cache a fixed size (app/llm/vllm.py)
        have, where = machine.ram, "RAM; the KV cache is 1 GiB on vLLM's CPU build"
        room_for_kv = min(GIB, have - weights)
    else:
        gpus = [machine.gpus[i] for i in place.vllm_gpus[:tp] if 0 <= i < len(machine.gpus)]
        per_gpu = int(VLLM_GPU_SHARE * min(gpus or [0]))
        have = per_gpu * max(len(gpus), 1)
        where = f"{VLLM_GPU_SHARE:.0%} of GPUs {_ids(place.vllm_gpus[:tp])}"
        room_for_kv = have - weights
        if not gpus:  # WHALE_VLLM_GPUS names none of this machine's: refused by _check_split
            lines.append(f"vLLM: on GPUs {_ids(place.vllm_gpus)}, none of them here")
            return
    if not length:
        at = "(KV cache not estimated: no max_model_len, no max_position_embeddings)"
    lines.append(f"vLLM: ≈ {_gib(need)} {at}: {_describe(parts)}; has {_gib(have)} ({where})")
    if weights > have:
        more = (
            f"give it more GPUs: --tensor-parallel-size {_tensor_parallel(shape, weights, per_gpu)}"
            " in WHALE_VLLM_ARGS, with as many GPUs in WHALE_VLLM_GPUS"
            if place.vllm == "gpu" and per_gpu
            else "serve it on a machine with more memory, or a smaller model (WHALE_LLM_MODEL)"
        )
        refusals.append(
            f"vLLM's weights alone need ≈ {_gib(weights)}, it has {_gib(have)} ({where}): {more}"
        )
    elif kv > room_for_kv:
        longest = room_for_kv // (kv // length)
        refusals.append(
            f"vLLM needs ≈ {_gib(need)} (weights and one sequence of {length} tokens {at}), it "
            f"has {_gib(have)} ({where}): lower [runtime] vllm_max_model_len: set it to "
            f"{longest} or less (the longest that fits), or give it more GPUs "
            "(--tensor-parallel-size in WHALE_VLLM_ARGS)"
        )


def _tensor_parallel(shape: ModelShape, weights: int, per_gpu: int) -> int:
    """The fewest GPUs whose share holds the weights that vLLM accepts: a tensor-parallel size
    must divide the attention heads."""
    least = -(-weights // per_gpu)
    return next((k for k in range(least, shape.heads + 1) if shape.heads % k == 0), least)


def _check_trainer(shape, experiment, settings, place, machine, lines, refusals) -> None:
    """The trainer's line; a refusal when its weights, gradients and AdamW state (exact) do not
    fit, a warning line when the longest forward pass allowed (a bound) would not."""
    rft = experiment.rft
    rows, seq = _forward_pass(experiment, settings, place.trainer_processes)
    parts = trainer_memory(shape, rft, rows, seq, place.trainer_processes, place.launch.sharding)
    static = sum(v for k, v in parts.items() if k != ACTIVATIONS)
    kind = "LoRA" if rft.lora else "full fine-tune"
    how = f"{place.why_trainer}, {place.trainer_processes} process(es)"
    if place.launch.sharding:
        how += f", {place.launch.sharding} splitting {', '.join(SHARDED[place.launch.sharding])}"
    if place.trainer == "cpu":
        have, where = machine.ram, "RAM"
    else:
        n = len(machine.gpus)
        have = min((machine.gpus[i] for i in place.trainer_gpus if 0 <= i < n), default=0)
        where = f"GPU {_ids(place.trainer_gpus)}, each"
        if settings.colocate:  # vLLM sleeps (level 1): weights to RAM, KV cache freed
            where += ", vLLM asleep while it trains"
    lines.append(
        f"trainer ({kind}; {how}; up to {rows} rows of {seq} tokens per forward pass): "
        f"≈ {_gib(static)} per process and up to {_gib(parts[ACTIVATIONS])} more: "
        f"{_describe(parts)}; has {_gib(have)} ({where})"
    )
    if place.trainer == "gpu" and not place.trainer_gpus:
        return  # refused by _check_split: no GPU left to it
    if not rft.lora and shape.params > FULL_FT_CPU_LIMIT and place.trainer == "cpu":
        refusals.append(
            f"a full fine-tune of a {shape.params / 1e9:.1f}B-parameter model would train on the "
            f"CPU ({place.why_trainer}): on a GPU host set WHALE_TRAIN_ACCELERATE_CONFIG="
            "configs/accelerate/fsdp.yaml (docs/gpu-hosts.md), or set [rft] lora = true"
        )
    elif static > have:
        whole = sum(v for k, v in trainer_memory(shape, rft, 0, 0).items() if k != ACTIVATIONS)
        refusals.append(
            f"the trainer needs ≈ {_gib(static)} per process before any activation "
            f"({_describe(parts)}), the {where} has {_gib(have)}: "
            + _more_memory(rft, place, machine, -(-whole // max(have, 1)))
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


def _forward_pass(experiment, settings, processes: int) -> tuple[int, int]:
    """(rows, tokens per row) of a training process's longest forward pass allowed, as
    app/training/train.py splits a mini-batch: batch_size counts the whole step's examples
    (rollouts: every call of each, up to max_calls), or each process's under batch_scope
    "rank"; micro_batch_size splits it. A row holds max_seq_len tokens (default: the rollout's
    token budget), plus max_seq_len_per_turn for each turn up to max_calls."""
    rft = experiment.rft
    max_calls = experiment.rollout.max_calls or settings.rollout_max_calls
    calls = max_calls if rft.batch_unit == "rollout" else 1
    per_step = rft.batch_size * calls * (processes if rft.batch_scope == "rank" else 1)
    rows = rft.micro_batch_size or -(-per_step // processes)
    seq = rft.max_seq_len or experiment.rollout.max_tokens or settings.rollout_max_tokens
    return rows, seq + rft.max_seq_len_per_turn * max_calls


def _more_memory(rft, place, machine, least: int) -> str:
    """What to set when the trainer's weights, gradients and AdamW state exceed one device:
    LoRA, or the processes FSDP would split them over (`least`, at this device's size)."""
    fixes = [] if rft.lora else ["set [rft] lora = true"]
    n = len(machine.gpus)
    if place.trainer == "gpu" and least <= n:
        if place.launch.sharding in ("FSDP", "ZeRO-3"):
            fixes.append(
                f"give the trainer {least} GPUs or more ({place.launch.set_in.format(least)}, "
                "fewer GPUs in WHALE_VLLM_GPUS, or [runtime] colocate = true)"
            )
        else:
            fixes.append(
                f"train under FSDP on {least} GPUs or more (WHALE_TRAIN_ACCELERATE_CONFIG="
                f"configs/accelerate/fsdp.yaml with num_processes = {least})"
            )
    elif place.trainer == "gpu":
        fixes.append(f"a machine with {least} GPUs of this size or more, under FSDP")
    else:
        fixes.append("train on GPUs under FSDP (WHALE_TRAIN_ACCELERATE_CONFIG)")
    return ", or ".join(fixes)


def _describe(parts: dict[str, int]) -> str:
    return ", ".join(f"{name} {_gib(n)}" for name, n in parts.items())
