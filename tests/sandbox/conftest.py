"""Sandbox fixtures: every test here runs against each backend that exists on the machine."""

import asyncio
import shutil
import socket
import tempfile
import textwrap
from pathlib import Path

import pytest

from sandbox import docker as docker_backend
from sandbox import image
from sandbox.pool import Limits, SandboxPool
from sandbox.process import ProcessLauncher
from tests.conftest import MISSING

BACKENDS = ["process", "process-rlimits-only", "docker"]


@pytest.fixture(scope="session")
def docker_image() -> str:
    why = docker_backend.engine_available()
    if why is not None:
        pytest.skip(f"{MISSING}the Docker engine ({why})")
    return image.build(say=lambda m: None)


@pytest.fixture(scope="session")
def make_launcher(request):
    def make(backend: str):
        if backend == "docker":
            tag = request.getfixturevalue("docker_image")
            return docker_backend.DockerLauncher(tag, owner="tests")
        # rlimits alone even as root: this suite's machines are throwaway (the product refuses)
        launcher = ProcessLauncher(root_without_bwrap=True)
        if backend == "process":
            if not launcher.bwrap:
                pytest.skip(f"{MISSING}bubblewrap is not installed")
        else:
            launcher.bwrap = False
        return launcher

    return make


@pytest.fixture
def gateway_socket(tmp_path):
    """A listening Unix socket nobody answers on: enough for harnesses that call no model."""
    path = tmp_path / "gw" / "gateway.sock"
    path.parent.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    path.chmod(0o666)
    yield path
    listener.close()


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def short_dir():
    """A folder with a short path, as the workbench's runtime folder is: a Unix socket's path
    must fit in 107 bytes, which tmp_path under xdist (.../popen-gw1/test_...) may not."""
    path = Path(tempfile.mkdtemp(prefix="whale-sbx-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run_harness(tmp_path, short_dir, backend, make_launcher, gateway_socket):
    """run_harness(code, task=None, **limits) -> SandboxResult on the current backend."""
    launcher = make_launcher(backend)

    def run(code: str, task=None, **limits):
        harness = tmp_path / "harness.py"
        harness.write_text(textwrap.dedent(code))
        harness.chmod(0o644)

        async def main():
            pool = SandboxPool(
                launcher,
                gateway_socket,
                short_dir / "sandboxes",
                Limits(**{"wall_s": 20, **limits}),
            )
            try:
                return await pool.run(harness, task or {"question": "q"}, "token")
            finally:
                await pool.close()

        return asyncio.run(main())

    return run
