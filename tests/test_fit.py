"""The plan checked against the machine (app/fit.py): estimates from model configs of several
sizes, and the refusals a user gets before anything starts, each naming what to set."""

import json
import math
import os
import struct
import subprocess
from pathlib import Path

import pytest

from app import fit
from app.config import Settings
from app.loop.experiment_file import ExperimentError, load, parse
from app.loop.manager import check_fit
from tests.conftest import REPO

CONFIGS = Path(__file__).parent / "model_configs"
PAPER = REPO / "experiments" / "paper"
GB80 = 80 << 30


def shape(name: str) -> fit.ModelShape:
    return fit.shape_of(json.loads((CONFIGS / f"{name}.json").read_text()))


def paper(name: str = "math-whale", **runtime):
    exp, _ = load(PAPER / f"{name}.toml")
    settings = Settings(home=Path("/nonexistent"), **exp.runtime.model_dump(exclude_none=True))
    return exp, settings.model_copy(update=runtime)


def host(gpus: int = 0, gpu_bytes: int = GB80, ram_gib: int = 512, disk_gib: int = 4000):
    return fit.Machine([gpu_bytes] * gpus, ram_gib << 30, disk_gib << 30, "/store")


def test_shapes_of_three_sizes():
    demo, two, four = shape("smollm2-135m"), shape("qwen3.5-2b-like"), shape("qwen3.5-4b-like")
    # the demo model's weights hold 134,515,008 parameters: the config's count is within 1%
    assert abs(demo.params - 134_515_008) / 134_515_008 < 0.01
    assert (demo.kv_layers, demo.kv_heads, demo.head_dim) == (30, 3, 64)
    assert demo.dtype_bytes == 2  # a float32 checkpoint is served in bfloat16
    assert 1.5e9 < two.params < 2.3e9 and 3.5e9 < four.params < 5e9
    # hybrid attention: one layer in four holds a KV cache (interval, or the layer list)
    assert (two.kv_layers, four.kv_layers) == (6, 8)


def test_exact_count_from_the_weights(tmp_path):
    cache = Path(os.environ.get("WHALE_MODEL_CACHE", "~/.cache/whale/models")).expanduser()
    folder = cache / "SmolLM2-135M-Instruct"
    if not (folder / "model.safetensors").is_file():
        pytest.skip("the demo model is not converted here (WHALE_MODEL_CACHE)")
    assert fit.read_shape(str(folder)).params == 134_515_008
    (tmp_path / "config.json").write_text((CONFIGS / "qwen3.5-2b-like.json").read_text())
    assert fit.read_shape(str(tmp_path)).params == shape("qwen3.5-2b-like").params
    assert fit.read_shape(str(tmp_path / "missing")) is None


def test_memory_estimates():
    two = shape("qwen3.5-2b-like")
    exp, _ = paper()
    full = fit.trainer_memory(two, exp.rft, rows=1, seq=10240)
    # float32 weights and gradients, AdamW's two moments: 16 bytes per parameter
    assert full["weights"] + full["gradients"] + full["AdamW state"] == 16 * two.params
    sharded = fit.trainer_memory(two, exp.rft, 1, 10240, processes=8, sharding="FSDP")
    assert sharded["AdamW state"] == full["AdamW state"] // 8
    assert sharded["weights"] == full["weights"] // 8
    lora = fit.trainer_memory(two, exp.rft.model_copy(update={"lora": True}), 1, 10240)
    assert lora["AdamW state"] < full["AdamW state"] / 100
    assert full[fit.ACTIVATIONS] * 4 == fit.trainer_memory(two, exp.rft, 4, 10240)[fit.ACTIVATIONS]
    vllm = fit.vllm_memory(two, 32768)
    # 6 KV layers x 2 (K, V) x 2 heads x 256 x 2 bytes per token
    assert vllm["KV cache, one sequence"] == 6 * 2 * 2 * 256 * 2 * 32768
    assert vllm["weights"] == 2 * two.params


def test_retention_disk_follows_keep_settings():
    two = shape("qwen3.5-2b-like")
    exp, _ = paper()  # 420 steps, keep_every 7, keep_last 1, 10 weight phases
    total, how = fit.retention_disk(two, exp)
    assert how == "71 of 420 checkpoints kept, 1 with its optimizer state"
    assert total == 71 * 4 * two.params + 8 * two.params  # one carried AdamW state
    capped = exp.model_copy(deep=True)
    capped.rft.max_disk_gb = 100
    assert fit.retention_disk(two, capped)[0] == 100e9


def test_retention_disk_follows_what_retention_keeps():
    two = shape("qwen3.5-2b-like")
    exp, _ = paper()  # optimizer_state "run": every step writes optimizer.pt
    unset = exp.model_copy(deep=True)
    unset.rft.keep_last = unset.rft.keep_every = None
    # no retention setting: retention does nothing, each checkpoint keeps its AdamW state too
    total, how = fit.retention_disk(two, unset)
    assert total == 420 * (4 + 8) * two.params
    assert how == "420 of 420 checkpoints kept, 420 with its optimizer state"
    # max_disk_gb alone: every checkpoint's weights until the budget, one optimizer state
    budget = unset.model_copy(deep=True)
    budget.rft.max_disk_gb = 1e6
    assert fit.retention_disk(two, budget)[0] == 420 * 4 * two.params + 8 * two.params
    # under FSDP or DeepSpeed no optimizer state is saved; "step" saves none either
    assert fit.retention_disk(two, unset, sharded=True)[0] == 420 * 4 * two.params
    fresh = unset.model_copy(deep=True)
    fresh.rft.optimizer_state = "step"
    assert fit.retention_disk(two, fresh)[0] == 420 * 4 * two.params
    # a LoRA checkpoint is its adapter, with the adapter's AdamW state
    lora = unset.model_copy(deep=True)
    lora.rft.lora = True
    adapter = 4 * fit._lora_params(two, lora.rft)
    assert fit.retention_disk(two, lora)[0] == 420 * 3 * adapter


def test_full_fine_tune_of_2b_on_the_cpu_is_refused():
    exp, settings = paper()
    refused = fit.check(exp, settings, host(), shape("qwen3.5-2b-like")).refusals
    assert len(refused) == 1
    assert "full fine-tune of a 1.7B-parameter model would train on the CPU" in refused[0]
    assert "WHALE_TRAIN_ACCELERATE_CONFIG=configs/accelerate/fsdp.yaml" in refused[0]
    assert "lora = true" in refused[0]
    # the demo model's full fine-tune on the CPU, or a LoRA of the 2B, is allowed
    assert not fit.check(exp, settings, host(), shape("smollm2-135m")).refusals
    lora = exp.model_copy(deep=True)
    lora.rft.lora = True
    assert not fit.check(lora, settings, host(), shape("qwen3.5-2b-like")).refusals


def test_vllm_and_trainer_on_the_same_gpus_need_colocation():
    exp, settings = paper(train_accelerate_config=REPO / "configs/accelerate/fsdp.yaml")
    two, eight = shape("qwen3.5-2b-like"), host(gpus=8)
    refused = fit.check(exp, settings, eight, two).refusals
    assert (
        len(refused) == 1 and "vLLM and the trainer would share GPUs 0,1,2,3,4,5,6,7" in refused[0]
    )
    assert "WHALE_VLLM_GPUS" in refused[0] and "colocate = true" in refused[0]
    six = settings.model_copy(
        update={"vllm_gpus": "0,1", "train_accelerate_args": "--num_processes 6"}
    )
    split = fit.check(exp, six, eight, two)
    assert not split.refusals
    assert any("GPU 2,3,4,5,6,7" in line for line in split.lines)
    assert not fit.check(exp, settings.model_copy(update={"colocate": True}), eight, two).refusals
    # attached servers are elsewhere: nothing shared here
    attached = settings.model_copy(update={"vllm_urls": "http://gpu-box:8000"})
    assert not fit.check(exp, attached, eight, two).refusals


def test_memory_and_disk_refusals_name_what_to_set():
    exp, settings = paper(train_accelerate_args="--num_processes 1", vllm_gpus="0")
    four, small = shape("qwen3.5-4b-like"), host(gpus=2, gpu_bytes=24 << 30, disk_gib=100)
    refused = fit.check(exp, settings, small, four).refusals
    trainer, disk = refused
    # 16 bytes per parameter of a 4B model on a 24 GiB GPU, before any activation
    assert f"the trainer needs ≈ {16 * four.params / fit.GIB:.1f} GiB per process" in trainer
    assert "has 24.0 GiB: set [rft] lora = true" in trainer
    assert "the checkpoints need" in disk and "keep_last, keep_every or max_disk_gb" in disk
    long = settings.model_copy(update={"vllm_max_model_len": 4_000_000})
    refused = fit.check(exp, long, small, four).refusals
    assert any("lower [runtime] vllm_max_model_len" in r for r in refused)
    # long sequences are a warning with the micro-batch that fits, not a refusal
    roomy = fit.check(exp, settings, host(gpus=2), shape("qwen3.5-2b-like"))
    assert not roomy.refusals
    assert any("set [rft] micro_batch_size = 1" in line for line in roomy.lines)


def test_the_web_start_refuses_unless_forced():
    exp, settings = paper()
    settings = settings.model_copy(update={"llm_model": str(CONFIGS / "missing")})
    check_fit(settings, exp, "ui", force=False)  # no config at hand: nothing to refuse on
    toml = (PAPER / "math-whale.toml").read_text()
    exp = parse(toml, "ui", web=True)
    settings = settings.model_copy(update={"llm_model": str(_model_folder("qwen3.5-2b-like"))})
    with pytest.raises(ExperimentError, match="this plan cannot run here: .*a full fine-tune"):
        check_fit(settings, exp, "ui", force=False)
    check_fit(settings, exp, "ui", force=True)


def _model_folder(name: str) -> Path:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="whale-fit-"))
    (folder / "config.json").write_text((CONFIGS / f"{name}.json").read_text())
    return folder


def test_whale_run_refuses_before_anything_starts(tmp_path):
    model = _model_folder("qwen3.5-2b-like")
    env = {**os.environ, "WHALE_HOME": str(tmp_path / "home"), "WHALE_LLM_MODEL": str(model)}
    whale = [str(REPO / ".venv" / "bin" / "whale"), "run", str(PAPER / "math-whale.toml")]
    # the file names its own model: the machine check reads the one the runtime gives
    text = (PAPER / "math-whale.toml").read_text().replace('"Qwen/Qwen3.5-2B"', f'"{model}"')
    path = tmp_path / "math-whale.toml"
    path.write_text(text)
    whale[-1] = str(path)
    dry = subprocess.run([*whale, "--dry-run"], capture_output=True, text=True, env=env)
    assert dry.returncode == 0, dry.stderr
    assert "refused: a full fine-tune of a 1.7B-parameter model" in dry.stdout
    assert "--force runs it anyway" in dry.stdout
    run = subprocess.run(whale, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode != 0
    assert "this plan cannot run here: " in run.stderr
    assert "a full fine-tune of a 1.7B-parameter model" in run.stderr
    assert not (tmp_path / "home" / "whale.db").exists()  # nothing was started


FSDP = REPO / "configs/accelerate/fsdp.yaml"
ZERO2 = REPO / "configs/accelerate/deepspeed-zero2.yaml"


def test_more_processes_than_the_trainers_gpus_are_refused():
    exp, settings = paper(train_accelerate_config=FSDP, vllm_gpus="0,1")
    two, eight = shape("qwen3.5-2b-like"), host(gpus=8)
    # fsdp.yaml starts 8 processes; vLLM takes 2 of the 8 GPUs: ranks 6 and 7 have none
    refused = fit.check(exp, settings, eight, two).refusals
    assert len(refused) == 1
    assert "accelerate would start 8 training processes" in refused[0]
    assert "the trainer has 6 GPUs (2,3,4,5,6,7)" in refused[0]
    assert f"set num_processes = 6 in {FSDP}" in refused[0]
    assert "unset WHALE_VLLM_GPUS and set [runtime] colocate = true" in refused[0]
    # every spelling accelerate accepts on its command line
    for args in ("--num_processes 6", "--num_processes=6", "--num-processes=6"):
        given = settings.model_copy(update={"train_accelerate_args": args})
        assert not fit.check(exp, given, eight, two).refusals, args
    too_many = settings.model_copy(update={"train_accelerate_args": "--num_processes=7"})
    refused = fit.check(exp, too_many, eight, two).refusals
    assert "set --num_processes 6 in WHALE_TRAIN_ACCELERATE_ARGS" in refused[0]
    assert "or WHALE_VLLM_GPUS=0 (the trainer gets the other 7)" in refused[0]
    # without a split: 8 processes on a 4-GPU machine
    four = settings.model_copy(update={"vllm_gpus": None, "colocate": True})
    refused = fit.check(exp, four, host(gpus=4), two).refusals
    assert len(refused) == 1 and f"set num_processes = 4 in {FSDP}" in refused[0]
    # multi-node.yaml's num_processes counts both machines' (16): 8 on this one
    nodes = REPO / "configs/accelerate/multi-node.yaml"
    eight_here = four.model_copy(update={"train_accelerate_config": nodes})
    assert not fit.check(exp, eight_here, eight, two).refusals
    refused = fit.check(exp, eight_here, host(gpus=4), two).refusals
    assert len(refused) == 1 and f"set num_processes = 8 in {nodes}" in refused[0]


def test_vllm_taking_every_gpu_leaves_the_trainer_none():
    exp, settings = paper(train_accelerate_config=FSDP, vllm_gpus="0,1")
    refused = fit.check(exp, settings, host(gpus=2), shape("qwen3.5-2b-like")).refusals
    assert len(refused) == 1
    assert "WHALE_VLLM_GPUS=0,1 gives vLLM every GPU of this machine" in refused[0]
    assert "no GPU is left to the trainer: set WHALE_VLLM_GPUS=0" in refused[0]
    assert "colocate = true" in refused[0]
    # ids it cannot read, or a GPU the machine lacks, are named
    unread = settings.model_copy(update={"vllm_gpus": "GPU-5d2c"})
    refused = fit.check(exp, unread, host(gpus=2), shape("qwen3.5-2b-like")).refusals
    assert any("WHALE_VLLM_GPUS=GPU-5d2c is not a list of GPU ids" in r for r in refused)
    absent = settings.model_copy(update={"vllm_gpus": "3"})
    refused = fit.check(exp, absent, host(gpus=2), shape("qwen3.5-2b-like")).refusals
    assert any("WHALE_VLLM_GPUS=3 names GPU 3, which this machine lacks" in r for r in refused)


def test_lora_under_fsdp_shards_the_frozen_weights():
    fourteen = shape("qwen2.5-14b")
    exp, settings = paper(train_accelerate_config=FSDP, colocate=True)
    lora = exp.model_copy(deep=True)
    lora.rft.lora = True
    forty = host(gpus=8, gpu_bytes=40 << 30, disk_gib=10_000)
    checked = fit.check(lora, settings, forty, fourteen)
    assert not checked.refusals
    weights = fit._gib(4 * fourteen.params // 8)
    assert any(f"weights {weights}," in line for line in checked.lines)
    # one process holds them whole: 55 GiB, refused on a 40 GiB GPU, and not asked to use LoRA
    one = settings.model_copy(update={"train_accelerate_args": "--num_processes 1"})
    refused = fit.check(lora, one, forty, fourteen).refusals
    assert len(refused) == 1 and "lora = true" not in refused[0]
    assert "give the trainer 2 GPUs or more (--num_processes 2 in" in refused[0]


def test_zero2_replicates_parameters_zero3_shards_them(tmp_path):
    fourteen, forty = shape("qwen2.5-14b"), host(gpus=8, gpu_bytes=40 << 30, disk_gib=10_000)
    exp, settings = paper(train_accelerate_config=ZERO2, colocate=True)
    # ZeRO-2: each process holds the 14B model's float32 weights whole (55 GiB)
    refused = fit.check(exp, settings, forty, fourteen).refusals
    # its float32 weights whole, gradients and AdamW state split in 8: 5.5 bytes per parameter
    needs = f"the trainer needs ≈ {5.5 * fourteen.params / fit.GIB:.1f} GiB per process"
    assert len(refused) == 2 and needs in refused[0]
    assert "train under FSDP on 6 GPUs or more" in refused[0]
    # micro_batch_size fails at the first step under DeepSpeed (the paper's plan sets 2)
    assert "micro_batch_size = 2 is not supported under DeepSpeed" in refused[1]
    exp.rft.micro_batch_size = None
    parts = fit.trainer_memory(fourteen, exp.rft, 1, 1, processes=8, sharding="ZeRO-2")
    assert parts["weights"] == 4 * fourteen.params
    assert parts["AdamW state"] == 8 * fourteen.params // 8
    # ZeRO-3, from the config, from its deepspeed_config_file, or on the command line
    zero3 = tmp_path / "zero3.yaml"
    zero3.write_text(ZERO2.read_text().replace("zero_stage: 2", "zero_stage: 3"))
    from_file = tmp_path / "from-file.yaml"
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    from_file.write_text(
        ZERO2.read_text().replace("zero_stage: 2", f"deepspeed_config_file: {tmp_path}/ds.json")
    )
    for update in (
        {"train_accelerate_config": zero3},
        {"train_accelerate_config": from_file},
        {
            "train_accelerate_config": None,
            "train_accelerate_args": "--use_deepspeed --zero_stage=3 --num_processes=8",
        },
    ):
        checked = fit.check(exp, settings.model_copy(update=update), forty, fourteen)
        assert not checked.refusals, update
        assert any("ZeRO-3 splitting weights, gradients, AdamW state" in x for x in checked.lines)


def test_vllm_at_the_models_default_length_is_checked():
    two = shape("qwen3.5-2b-like")
    exp, settings = paper(vllm_gpus="0", colocate=True)
    exp.rft.lora = True  # the trainer on the CPU: allowed
    unset = settings.model_copy(update={"vllm_max_model_len": None})
    weights, kv = 2 * two.params, fit.vllm_memory(two, 262144)["KV cache, one sequence"]
    # a GPU with room for the weights and half of one sequence of 262,144 tokens
    gpu = int((weights + kv // 2) / fit.VLLM_GPU_SHARE) + 1
    checked = fit.check(exp, unset, host(gpus=2, gpu_bytes=gpu), two)
    line = next(x for x in checked.lines if x.startswith("vLLM"))
    assert "at the model's max_position_embeddings 262144 (vLLM's default max_model_len)" in line
    (refused,) = [r for r in checked.refusals if r.startswith("vLLM")]
    longest = int(refused.split("set it to ")[1].split()[0])
    assert 131072 <= longest < 131072 + 8
    # the length it names fits; one token more does not
    named = settings.model_copy(update={"vllm_max_model_len": longest})
    assert not fit.check(exp, named, host(gpus=2, gpu_bytes=gpu), two).refusals
    over = settings.model_copy(update={"vllm_max_model_len": longest + 1})
    assert fit.check(exp, over, host(gpus=2, gpu_bytes=gpu), two).refusals
    # weights alone over the GPU's share: tensor parallelism named with its size
    small = host(gpus=2, gpu_bytes=int(weights / fit.VLLM_GPU_SHARE * 0.6))
    refused = fit.check(exp, settings, small, two).refusals
    assert any(
        r.startswith("vLLM's weights alone need") and "--tensor-parallel-size 2 in" in r
        for r in refused
    )


def test_mixture_of_experts_configs():
    # every expert counted: Mixtral-8x7B is 46.7B parameters (a dense count says 7.2B)
    assert shape("mixtral-8x7b").params == 46_702_792_704
    # Qwen3-30B-A3B: 30.5B in all (its q/k norms, 256 per layer, left out)
    assert abs(shape("qwen3-30b-a3b").params - 30_532_122_624) < 48 * 256 + 1
    # a layout not counted here says so rather than giving a wrong figure
    deepseek = shape("deepseek-v3-like")
    assert deepseek.params is None and "deepseek_v3" in deepseek.uncounted
    # Mixtral's 87 GiB of bfloat16 weights on 24 GiB GPUs: 4 would hold them, 8 divides its
    # 32 attention heads
    exp, settings = paper(vllm_gpus="0")
    refused = fit.check(exp, settings, host(gpus=2, gpu_bytes=24 << 30), shape("mixtral-8x7b"))
    assert any("--tensor-parallel-size 8 in WHALE_VLLM_ARGS" in r for r in refused.refusals)
    exp, settings = paper()
    lines = fit.check(exp, settings, host(), deepseek).lines
    assert any("parameters not estimated: a mixture-of-experts config" in x for x in lines)


def _safetensors(path: Path, tensors: dict[str, list[int]]) -> None:
    """A safetensors file of float32 zeros with these shapes."""
    header, offset = {}, 0
    for name, dims in tensors.items():
        size = 4 * math.prod(dims)
        header[name] = {"dtype": "F32", "shape": dims, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_weights_count_follows_the_index(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "smollm2-135m.json").read_text())
    _safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a.weight": [4, 8]})
    _safetensors(tmp_path / "model-00002-of-00002.safetensors", {"b.weight": [8, 2]})
    # the same weights again under the original names, as Mistral's folders hold them
    _safetensors(tmp_path / "consolidated.safetensors", {"wa": [4, 8], "wb": [8, 2]})
    index = {"weight_map": {"a.weight": "model-00001-of-00002.safetensors"}}
    index["weight_map"]["b.weight"] = "model-00002-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert fit.read_shape(str(tmp_path)).params == 48
    (tmp_path / "model.safetensors.index.json").unlink()  # no index: the hub's files still
    assert fit.read_shape(str(tmp_path)).params == 48


def test_forward_pass_follows_batch_scope_and_turns():
    exp, settings = paper(train_accelerate_config=FSDP, colocate=True)
    unsplit = exp.model_copy(deep=True)
    unsplit.rft.micro_batch_size = None
    # batch_scope "rank": each of 8 processes takes 64 rollouts of up to 16 calls
    checked = fit.check(unsplit, settings, host(gpus=8), shape("qwen3.5-2b-like"))
    assert any("up to 1024 rows of 10240 tokens" in x for x in checked.lines)
    unsplit.rft.batch_scope = "global"
    unsplit.rft.max_seq_len_per_turn = 100
    checked = fit.check(unsplit, settings, host(gpus=8), shape("qwen3.5-2b-like"))
    assert any("up to 128 rows of 11840 tokens" in x for x in checked.lines)


def test_use_cpu_holds_for_one_process_only():
    cpu_config = REPO / "configs/accelerate/cpu-2proc.yaml"
    two_gpus = host(gpus=2)
    # two processes: accelerate's multi-process launcher does not pass use_cpu on, they take
    # the GPUs they see (app/training/train.py's on_cpu)
    settings = Settings(home=Path("/nonexistent"), train_accelerate_config=cpu_config)
    assert fit.placement(settings, two_gpus).trainer == "gpu"
    one = settings.model_copy(update={"train_accelerate_args": "--num_processes 1"})
    assert fit.placement(one, two_gpus).trainer == "cpu"
    forced = settings.model_copy(update={"train_accelerate_args": "--cpu"})
    assert fit.placement(forced, two_gpus).trainer == "cpu"
