"""Child processes die with the workbench: a `kill -9` of the server must not leave a training
job or a model server running on its own (Linux: the parent-death signal)."""

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn`: the child gets SIGKILL when the process that started it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
