"""docker-compose.yml is the production recipe: it must at least be a valid compose file."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import MISSING

REPO = Path(__file__).resolve().parent.parent


def compose_config(*profile: str) -> dict:
    """The file as docker-compose resolves it (with `--profile NAME` when given)."""
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip(
            f"{MISSING}docker-compose is not installed (scripts/setup.sh --test installs it)"
        )
    args = ["--profile", profile[0]] if profile else []
    proc = subprocess.run(
        [compose, "-f", str(REPO / "docker-compose.yml"), *args, "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def test_compose_file_validates():
    services = compose_config()["services"]
    # What a plain `docker compose up` starts: the services outside any profile (docker-compose
    # v1 prints profiled services here too, v2 leaves them out).
    default = {name for name, s in services.items() if not s.get("profiles")}
    assert default == {"vllm", "workbench", "sandbox-image"}
    assert "/var/run/docker.sock:/var/run/docker.sock:rw" in services["workbench"]["volumes"]


def test_scale_profile_attaches_to_every_replica():
    services = compose_config("scale")["services"]
    scale = {name for name, s in services.items() if "scale" in s.get("profiles", [])}
    assert {"vllm-1", "vllm-2", "workbench-scale"} <= scale
    replicas = {  # of this profile or none (docker-compose v1 prints every profile's)
        name
        for name, s in services.items()
        if s.get("image", "").startswith("vllm/") and s.get("profiles", ["scale"]) == ["scale"]
    }
    assert replicas >= {"vllm", "vllm-1", "vllm-2"}

    env = services["workbench-scale"]["environment"]
    assert env["WHALE_BACKEND"] == "vllm"
    hosts = {url.split("//")[1].split(":")[0] for url in env["WHALE_VLLM_URLS"].split(",")}
    assert hosts == replicas

    # Tensor parallelism through vLLM's own option, over as many pinned GPUs as its size.
    parallel = {}
    for name in replicas:
        command = services[name]["command"]
        if "--tensor-parallel-size" in command:
            parallel[name] = int(command[command.index("--tensor-parallel-size") + 1])
    assert parallel, "no replica sets --tensor-parallel-size"
    for name, size in parallel.items():
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"][0]
        assert len(devices["device_ids"]) == size, name

    # Hot-loading: vLLM reads an adapter from the path the workbench sends, so every replica
    # mounts the workbench's store volume at the same path.
    store = next(
        v
        for v in services["workbench-scale"]["volumes"]
        if env["WHALE_HOME"].startswith(v.split(":")[1])
    )
    volume, path = store.split(":")[:2]
    for name in replicas:
        assert any(v.split(":")[:2] == [volume, path] for v in services[name]["volumes"]), name


def test_train_profile_splits_one_host_between_vllm_and_the_trainer():
    services = compose_config("train")["services"]
    vllm, workbench = services["vllm-train"], services["workbench-train"]

    def gpus(service: dict) -> set[str]:
        return set(service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"])

    # the split: no GPU on both sides, eight in all
    assert not gpus(vllm) & gpus(workbench) and len(gpus(vllm) | gpus(workbench)) == 8
    size = int(vllm["command"][vllm["command"].index("--data-parallel-size") + 1])
    assert size == len(gpus(vllm))
    env = workbench["environment"]
    assert env["WHALE_VLLM_URLS"] == "http://vllm-train:8000/v1"
    assert env["WHALE_TRAIN_ACCELERATE_CONFIG"].endswith("configs/accelerate/fsdp.yaml")
    # one training process per GPU the container sees, counted where it runs
    assert "--num_processes $$(nvidia-smi -L | wc -l)" in " ".join(workbench["entrypoint"])
    assert workbench["build"]["args"]["TORCH_INDEX"].startswith("https://download.pytorch.org/")
    # full fine-tunes are loaded in place, from the store both see at the same path
    assert vllm["environment"]["VLLM_SERVER_DEV_MODE"] == "1"
    assert any(v.startswith("whale-data:/data") for v in vllm["volumes"])
    assert env["WHALE_HOME"].startswith("/data")
