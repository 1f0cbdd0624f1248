"""A checkpoint's weights as a download: its folder (a LoRA adapter, or full weights) streamed as
a tar, a file at a time in chunks, so that gigabytes of weights never sit in memory. Or, when
they cannot be had, why not (retention dropped them, the folder is not on this machine)."""

import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.db.schema import Checkpoint, utc

CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE  # a tar member's data is padded to whole 512-byte blocks


def weight_files(folder: Path) -> list[Path]:
    """The regular files under `folder`, sorted; links are not followed (a link in a folder the
    store names must not hand out a file from elsewhere)."""
    if folder.is_file() and not folder.is_symlink():
        return [folder]
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if path.is_file() and not path.is_symlink():
                found.append(path)
    return found


def download_of(checkpoint: Checkpoint) -> dict[str, Any]:
    """What the checkpoint page offers: {url, name, files, bytes}, or {refused: why}."""
    if checkpoint.weights_dropped_at is not None:
        when = utc(checkpoint.weights_dropped_at).strftime("%Y-%m-%d %H:%M UTC")
        return {
            "refused": f"its weights were dropped on {when} by the run's retention "
            "([rft] keep_last, keep_every, max_disk_gb): the folder is gone"
        }
    if not checkpoint.path:
        return {"refused": "no weights folder is recorded for it (the model is served elsewhere)"}
    folder = Path(checkpoint.path)
    if not folder.exists():
        return {"refused": f"its folder {folder} is not on this machine"}
    files = weight_files(folder)
    return {
        "url": f"/api/checkpoints/{checkpoint.id}/weights.tar",
        "name": f"checkpoint-{checkpoint.id}.tar",
        "files": [str(p.relative_to(folder)) if p != folder else p.name for p in files],
        "bytes": sum(p.stat().st_size for p in files),
    }


def weights_tar(checkpoint_id: int, folder: Path) -> Iterator[bytes]:
    """The folder as an uncompressed tar (weights barely compress), members under
    `checkpoint-N/`, read and sent a chunk at a time."""
    top = f"checkpoint-{checkpoint_id}"
    for path in weight_files(folder):
        relative = path.relative_to(folder) if path != folder else Path(path.name)
        info = tarfile.TarInfo(f"{top}/{relative.as_posix()}")
        stat = path.stat()
        info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), 0o644
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        sent = 0
        with open(path, "rb") as f:
            while sent < info.size:  # no more than the header said, should the file grow
                chunk = f.read(min(CHUNK, info.size - sent))
                if not chunk:
                    break
                sent += len(chunk)
                yield chunk
        if sent < info.size:  # the file shrank meanwhile: the archive must still parse
            yield bytes(info.size - sent)
        yield bytes(-info.size % BLOCK)
    yield bytes(2 * BLOCK)  # the end-of-archive marker
