"""The plan checked against the machine (app/fit.py): estimates from model configs of several
sizes, and the refusals a user gets before anything starts, each naming what to set."""

import json
import os
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
    sharded = fit.trainer_memory(two, exp.rft, rows=1, seq=10240, shards=8)
    assert sharded["AdamW state"] == full["AdamW state"] // 8
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
    assert how == "71 of 420 checkpoints kept"
    assert total == 71 * 4 * two.params + 8 * two.params  # one carried AdamW state
    capped = exp.model_copy(deep=True)
    capped.rft.max_disk_gb = 100
    assert fit.retention_disk(two, capped)[0] == 100e9


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
    split = fit.check(exp, settings.model_copy(update={"vllm_gpus": "0,1"}), eight, two)
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
