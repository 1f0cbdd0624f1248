"""Build the sandbox image offline: debootstrap a minimal Debian rootfs with python3,
`docker import` it as the base, then build sandbox/Dockerfile on top.

The image tag is a hash of its inputs, so it is rebuilt exactly when the runner, the Dockerfile
or the base changes, and reused otherwise (also across fresh clones on the same machine).
"""

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import docker

HERE = Path(__file__).resolve().parent
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_TAG = f"whale-sandbox-base:{SUITE}"
# Only what the runner needs: python3 and its standard library.
PACKAGES = ["python3-minimal", "libpython3.11-stdlib"]


def image_tag() -> str:
    digest = hashlib.sha256()
    for name in ("Dockerfile", "runner.py"):
        digest.update((HERE / name).read_bytes())
    digest.update(" ".join([BASE_TAG, *PACKAGES]).encode())
    return f"whale-sandbox:{digest.hexdigest()[:12]}"


def _has_image(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def _build_base(client: docker.DockerClient, say) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="whale-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        say(f"debootstrap {SUITE} ({', '.join(PACKAGES)}) into {rootfs} (about a minute)")
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(rootfs),
                MIRROR,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for junk in (
            "var/cache/apt/archives",
            "var/lib/apt/lists",
            "usr/share/doc",
            "usr/share/man",
            "usr/share/locale",
        ):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        say(f"importing the rootfs as {BASE_TAG}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        client.api.import_image_from_stream(
            tar.stdout, repository=BASE_TAG.split(":")[0], tag=SUITE
        )
        if tar.wait() != 0:
            raise RuntimeError("tar of the rootfs failed")


def is_built(client: docker.DockerClient | None = None) -> bool:
    return _has_image(client or docker.from_env(), image_tag())


def build(client: docker.DockerClient | None = None, say=print, base: str | None = None) -> str:
    """Return the sandbox image tag, building what is missing."""
    client = client or docker.from_env()
    tag = image_tag()
    if _has_image(client, tag):
        return tag
    if base is None:
        base = BASE_TAG
        if not _has_image(client, base):
            _build_base(client, say)
    say(f"building {tag} from sandbox/Dockerfile")
    client.images.build(
        path=str(HERE), dockerfile="Dockerfile", tag=tag, buildargs={"BASE": base}, rm=True
    )
    return tag
