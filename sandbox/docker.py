"""The `docker` backend: runner servers as containers from the local sandbox image.

Each container: no network, read-only root, a small tmpfs /tmp that only the runner server may
write to, no /dev/shm, memory / CPU / pid limits, no-new-privileges, the runner as PID 1 (it reaps
orphans) as root with CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_KILL and CAP_SYS_ADMIN only, each
rollout under a uid of its own with no capabilities in a private directory and in network and
IPC namespaces of its own (sandbox/runner.py, "uid" scratch), Docker's default seccomp profile
with the runner's own filter stacked on it (sandbox/seccomp.py: no ptrace, no
process_vm_readv/writev, no new namespaces; the server's own variant allows it unshare alone),
and exactly five host mounts: the harness file and the two filters (read-only), the gateway's
socket, and a private control directory where the runner listens. Optional gVisor (`runtime="runsc"`).
"""

import asyncio
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import docker

from sandbox import seccomp

log = logging.getLogger(__name__)
LABEL = "whale.sandbox"


@dataclass(frozen=True)
class ContainerLimits:
    # The whole container, shared by the (up to 16) rollouts running in it at once.
    memory_mb: int = 4096
    cpus: float = 2.0
    pids: int = 256
    tmp_mb: int = 64


def owner_label(home: Path) -> str:
    """Containers are labelled with the store that started them, so a restart finds its own."""
    return hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:16]


def engine_available() -> str | None:
    """None when a Docker engine answers, else why not, in one plain line."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        docker.from_env(timeout=5).ping()
        return None
    except docker.errors.DockerException as exc:  # the SDK's text is a nested repr: say it plainly
        cause = exc.__context__ or exc
        if isinstance(cause, (FileNotFoundError, ConnectionRefusedError)) or "Connection" in str(
            exc
        ):
            return f"no Docker engine is running at {where}"
        if isinstance(cause, PermissionError) or "Permission denied" in str(exc):
            return f"no permission to use the Docker engine at {where}"
        return f"the Docker engine at {where} did not answer ({type(cause).__name__})"
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine to use
        return f"the Docker engine at {where} did not answer ({type(exc).__name__})"


class DockerLauncher:
    name = "docker"

    def __init__(
        self,
        image: str,
        owner: str,
        limits: ContainerLimits = ContainerLimits(),
        runtime: str | None = None,
    ):
        self.client = docker.from_env()
        self.image = image
        self.owner = owner
        self.limits = limits
        self.runtime = runtime

    def remove_leftovers(self) -> int:
        """Remove this store's containers left by a crash; returns how many."""
        stale = self.client.containers.list(all=True, filters={"label": f"{LABEL}={self.owner}"})
        for container in stale:
            container.remove(force=True)
        return len(stale)

    def _run(self, harness: Path, gateway_socket: Path, control_dir: Path):
        # the runner (root without CAP_DAC_OVERRIDE) creates its socket there; rollouts reach it
        os.chown(control_dir, 0, 0)
        control_dir.chmod(0o711)
        return self.client.containers.run(
            self.image,
            command=["serve", "/control/runner.sock", "/sandbox/harness.py"],
            detach=True,
            init=False,  # the runner is PID 1 and reaps orphans: docker-init would be a
            # dumpable process of the sandbox user, open to any rollout's /proc/1/mem
            network_mode="none",
            read_only=True,
            # /tmp: root's, not listable; each rollout writes to its own directory in it
            tmpfs={"/tmp": f"size={self.limits.tmp_mb}m,mode=0711"},
            ipc_mode="none",  # no /dev/shm, which every rollout could write to
            mem_limit=f"{self.limits.memory_mb}m",
            memswap_limit=f"{self.limits.memory_mb}m",
            nano_cpus=int(self.limits.cpus * 1e9),
            pids_limit=self.limits.pids,
            cap_drop=["ALL"],
            # the server's: it starts each rollout under its own uid, in network and IPC
            # namespaces of its own (SYS_ADMIN, for unshare only: the server's own filter refuses
            # mount, setns and the rest), and kills it. Rollouts have none of them.
            cap_add=["SETUID", "SETGID", "CHOWN", "KILL", "SYS_ADMIN"],
            security_opt=["no-new-privileges"],
            user="0:0",
            environment={
                "WHALE_SCRATCH": "uid",
                "WHALE_GATEWAY": "/gateway/gateway.sock",
                "WHALE_SECCOMP": "/sandbox/seccomp.bpf",
                "WHALE_SECCOMP_SERVER": "/sandbox/seccomp-server.bpf",
            },
            volumes={
                str(harness): {"bind": "/sandbox/harness.py", "mode": "ro"},
                str(seccomp.write(control_dir)): {"bind": "/sandbox/seccomp.bpf", "mode": "ro"},
                str(seccomp.write(control_dir, seccomp.SERVER_CALLS["docker"])): {
                    "bind": "/sandbox/seccomp-server.bpf",
                    "mode": "ro",
                },
                str(gateway_socket): {"bind": "/gateway/gateway.sock", "mode": "ro"},
                str(control_dir): {"bind": "/control", "mode": "rw"},
            },
            labels={LABEL: self.owner},
            runtime=self.runtime,
        )

    async def start(self, harness: Path, gateway_socket: Path, control_dir: Path):
        return await asyncio.to_thread(self._run, harness, gateway_socket, control_dir)

    def exited(self, container) -> str | None:
        try:
            container.reload()
            if container.status in ("created", "running"):
                return None
            logs = container.logs(tail=20).decode(errors="replace")
        except docker.errors.NotFound:
            return "the container is gone"
        except Exception as exc:  # noqa: BLE001 - requests' and docker's errors alike: an
            # engine that does not answer (restarting) has stopped its containers, or soon will
            return f"the Docker engine does not answer ({type(exc).__name__})"
        code = container.attrs["State"].get("ExitCode")
        oom = " (out of memory)" if container.attrs["State"].get("OOMKilled") else ""
        return f"container exited with code {code}{oom}: {logs}".strip()

    def unavailable(self) -> str | None:
        try:
            self.client.api.ping()
            return None
        except Exception as exc:  # noqa: BLE001 - requests' and docker's errors alike
            return f"the Docker engine does not answer: {exc}"

    async def stop(self, container) -> None:
        def remove():
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: its removal is already under way
                    raise

        await asyncio.to_thread(remove)
