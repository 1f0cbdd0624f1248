"""The system-call filter every sandboxed process runs under, on both backends.

It denies what Docker's default seccomp profile denies to an unprivileged container - the
kernel's largest attack surface (new namespaces, mounts, keyrings, bpf, perf, module and kexec
loading...) - and also what that profile allows since kernel 4.8 but a rollout must never do:
ptrace and process_vm_readv/writev against the runner server or a sibling rollout. On the
docker backend it stacks on Docker's own profile; on the process backend it is the only one.

libseccomp compiles it (architecture checks, the x32 ABI and syscall numbers are its job) into a
BPF program written to a file the sandbox gets read-only; the runner loads it with prctl before
any harness code exists in the process, and every process forked or exec'ed afterwards inherits
it, unremovably. A denied call fails with EPERM (clone3: ENOSYS, so that the C library falls back
to clone, whose namespace flags the filter can see).
"""

import errno
import tempfile
from functools import cache
from pathlib import Path

import pyseccomp as seccomp

DENIED = (
    # reading or steering other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    # namespaces and file systems
    "unshare",
    "setns",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "name_to_handle_at",
    "open_by_handle_at",
    # kernel interfaces with a history of privilege escalations
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "fanotify_init",
    # the machine itself: modules, kexec, clocks, swap, reboot, accounting, quotas, NUMA, I/O ports
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "query_module",
    "get_kernel_syms",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "stime",
    "clock_settime",
    "clock_adjtime",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "nfsservctl",
    "uselib",
    "ustat",
    "_sysctl",
    "vm86",
    "vm86old",
    "ioperm",
    "iopl",
    "mbind",
    "set_mempolicy",
    "get_mempolicy",
    "move_pages",
)
# clone flags that make a new namespace (linux/sched.h)
NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
PR_SET_DUMPABLE = 4  # the runner makes itself non-dumpable first; nobody may undo it


# What a runner server needs to give each rollout namespaces of its own (sandbox/runner.py):
# "unshare" on both backends (a network and an IPC namespace per rollout), and "mount" where it
# also mounts the rollout's own /tmp (the process backend). Each worker loads the full filter
# once it has done so. Even the server may make only these kinds of namespace.
SERVER_CALLS = {"process": ("unshare", "mount"), "docker": ("unshare",)}
ROLLOUT_NAMESPACES = ("CLONE_NEWNS", "CLONE_NEWIPC", "CLONE_NEWNET")


@cache
def program(server_calls: tuple[str, ...] = ()) -> bytes:
    """The compiled filter for this machine's architecture; `server_calls`: the runner server's
    own, which still allows those calls (SERVER_CALLS) to set up a rollout."""
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    deny = seccomp.ERRNO(errno.EPERM)
    for name in DENIED:
        if name not in server_calls:
            f.add_rule(deny, name)
    for name, flag in NAMESPACE_FLAGS.items():  # clone is fork too: only a new namespace is refused
        f.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        if "unshare" in server_calls and name not in ROLLOUT_NAMESPACES:
            f.add_rule(deny, "unshare", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # its flags sit in memory, out of sight
    f.add_rule(deny, "prctl", seccomp.Arg(0, seccomp.EQ, PR_SET_DUMPABLE))
    with tempfile.TemporaryFile() as out:  # libseccomp writes to a descriptor
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def write(folder: Path, server_calls: tuple[str, ...] = ()) -> Path:
    """The filter as a file in `folder`, world-readable (the sandbox user reads it)."""
    path = folder / ("seccomp-server.bpf" if server_calls else "seccomp.bpf")
    path.write_bytes(program(server_calls))
    path.chmod(0o644)
    return path
