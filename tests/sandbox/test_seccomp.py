"""The runner server's own filter: the namespaces it may make for a rollout, and no others."""

import ctypes
import errno
import json
import os

import pytest

from sandbox import seccomp
from sandbox.runner import _load_filter

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making namespaces needs root here")


def _unshare_outcomes(program: bytes) -> dict[str, str]:
    """In a child under `program`, unshare each kind of namespace: "ok" or the error's name."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            import sandbox.runner as runner

            runner._libc = libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
            libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: what lets the filter load
            _load_filter(program)
            found = {}
            for name, flag in seccomp.NAMESPACE_FLAGS.items():
                ok = libc.unshare(flag) == 0
                found[name] = "ok" if ok else errno.errorcode[ctypes.get_errno()]
            os.write(write, json.dumps(found).encode())
        finally:
            os._exit(0)
    os.close(write)
    out = b""
    while chunk := os.read(read, 4096):
        out += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(out)


@pytest.mark.parametrize("backend", ["process", "docker"])
def test_the_server_may_make_a_rollouts_namespaces_and_no_others(backend):
    found = _unshare_outcomes(seccomp.program(seccomp.SERVER_CALLS[backend]))
    allowed = {name: "ok" for name in seccomp.ROLLOUT_NAMESPACES}
    refused = {name: "EPERM" for name in seccomp.NAMESPACE_FLAGS if name not in allowed}
    assert found == {**allowed, **refused}


def test_a_rollout_may_make_no_namespace():
    found = _unshare_outcomes(seccomp.program())
    assert found == {name: "EPERM" for name in seccomp.NAMESPACE_FLAGS}
