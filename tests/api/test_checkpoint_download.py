"""GET /api/checkpoints/{id}/weights.tar: a checkpoint's folder as a tar, byte for byte; a
checkpoint whose weights retention dropped is refused with the reason, on its page too."""

import io
import json
import os
import tarfile

import torch
from safetensors.torch import save_file

from app.db.schema import Checkpoint, now
from tests.conftest import error_detail


def lora_folder(folder):
    """A LoRA checkpoint's folder as training writes one: the adapter (larger than one chunk
    of the stream), its config, the optimizer state."""
    folder.mkdir(parents=True)
    torch.manual_seed(0)
    tensors = {f"base_model.layers.{i}.lora_A.weight": torch.randn(4, 96 * 1024) for i in range(2)}
    save_file(tensors, folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text(json.dumps({"r": 4, "peft_type": "LORA"}))
    (folder / "optimizer.pt").write_bytes(os.urandom(1000))
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_lora_checkpoint_downloads_as_its_folder_byte_for_byte(store, client, tmp_path):
    files = lora_folder(tmp_path / "ckpt")
    (tmp_path / "secret").write_text("not part of the checkpoint")
    (tmp_path / "ckpt" / "link").symlink_to(tmp_path / "secret")  # never followed
    checkpoint = store.write(Checkpoint(kind="lora", name="lora-1", path=str(tmp_path / "ckpt")))

    page = client.get(f"/api/checkpoints/{checkpoint.id}").json()["download"]
    assert page["url"] == f"/api/checkpoints/{checkpoint.id}/weights.tar"
    assert sorted(page["files"]) == sorted(files) and page["bytes"] == sum(map(len, files.values()))
    answer = client.get(page["url"])

    assert answer.status_code == 200
    assert answer.headers["content-disposition"] == (
        f'attachment; filename="checkpoint-{checkpoint.id}.tar"'
    )
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as tar:
        members = tar.getmembers()
        got = {m.name: tar.extractfile(m).read() for m in members}
    assert got == {f"checkpoint-{checkpoint.id}/{name}": data for name, data in files.items()}
    assert files["adapter_model.safetensors"].__len__() > (1 << 20)  # streamed in chunks
    html = client.get(f"/checkpoints/{checkpoint.id}").text
    assert f'href="{page["url"]}"' in html and "3 files" in html


def test_a_checkpoint_whose_weights_were_dropped_is_refused_with_the_reason(store, client):
    checkpoint = store.write(
        Checkpoint(kind="lora", name="lora-2", path="/nowhere/job-2", weights_dropped_at=now())
    )

    answer = client.get(f"/api/checkpoints/{checkpoint.id}/weights.tar")

    assert answer.status_code == 410
    why = error_detail(answer)
    assert why.startswith(f"checkpoint {checkpoint.id}: its weights were dropped on ")
    assert "by the run's retention ([rft] keep_last, keep_every, max_disk_gb)" in why
    page = client.get(f"/api/checkpoints/{checkpoint.id}").json()["download"]
    assert "url" not in page and "retention" in page["refused"]
    html = client.get(f"/checkpoints/{checkpoint.id}").text
    assert 'id="weights-download-refused"' in html and "/weights.tar" not in html


def test_a_checkpoint_whose_folder_is_missing_is_refused(store, client):
    checkpoint = store.write(Checkpoint(kind="lora", name="lora-3", path="/nowhere/job-3"))

    answer = client.get(f"/api/checkpoints/{checkpoint.id}/weights.tar")

    assert answer.status_code == 410
    assert error_detail(answer).endswith("its folder /nowhere/job-3 is not on this machine")
