"""The runner: the workbench code that runs *inside* a sandbox. Standard library only.

`python -I -S runner.py serve CONTROL_SOCKET HARNESS_PATH` starts a small server that waits on
CONTROL_SOCKET. Each connection is one rollout and carries two JSON lines from the host: the
limits {"wall_s", "cpu_s", "output_bytes", "stop"} (padded to LIMITS_BYTES), which the server
reads, then {"task", "token", "memory_mb", ...}, which only the worker reads - so no rollout's
token is ever in the server, where every worker forked after it would find a copy. A connection
whose limits line is {"stop_key"} stops the rollout whose "stop" is that key's hash: the host
does so when the rollout's harness time is up (the host's clock leaves out the time waited on
the gateway; this server's own wall-clock limit is then only a backstop). The server forks a worker that runs
`run(task, llm, tools)` from the harness (compiled once, by the server), watches the worker's
wall-clock and output limits from its event loop (the memory limit is the worker's own rlimit)
and answers one JSON line with the result. One fork from a warm server per rollout is what makes
a rollout cost about a millisecond of sandbox CPU instead of an interpreter start.

Every process of the sandbox runs confined (`confine`): non-dumpable, no new privileges, and the
host's seccomp filter (WHALE_SECCOMP names the file).

Every rollout starts from a fresh, empty writable area, its working directory, HOME and TMPDIR,
which no later rollout sees (WHALE_SCRATCH, set by the backend, says how):
- "mount" (bubblewrap): the worker gets a mount namespace of its own with a new tmpfs on /tmp and
  /dev/shm, then drops the capabilities it did that with and loads the full filter; the server's
  own filter (WHALE_SECCOMP_SERVER) lets it do only that much more. Gone with the rollout's last
  process.
- "uid" (docker): the server runs as root with CAP_SETUID/SETGID/CHOWN/KILL/SYS_ADMIN only; each
  rollout runs under a uid of its own (ROLLOUT_UID_BASE + a slot free at the time) in a private
  directory of /tmp, which nobody else can write to or list; when it ends, a cleaner under that
  uid kills whatever the rollout left running and deletes what it wrote, before the slot is used
  again. The worker loads the full filter once it runs under its uid.
- "dir" (no bubblewrap: files are not isolated at all): a fresh directory, removed afterwards.

In "mount" and "uid", every rollout also gets a network and an IPC namespace of its own, made by
its worker before any harness code runs (`_own_namespaces`): no interface but a loopback that is
down, and no System V IPC object or POSIX message queue but its own. Concurrent rollouts cannot
meet on an abstract Unix socket, a loopback port or shared memory, whatever they run (a child
program or a C extension too: the namespace is the kernel's, not the import filter's). A path
Unix socket does not care about network namespaces: the gateway's stays the one way out.
In every mode, where the kernel has Landlock scopes (6.12+), the worker also gets a Landlock
domain of its own that keeps its abstract Unix sockets and its signals to itself: all that is
left where no namespace can be made ("dir"), and no sending signals to a sibling of the same uid
("mount").

The harness's `llm.chat` and `tools.<name>` reach the gateway through the Unix socket named by
WHALE_GATEWAY, with the rollout's token; nothing else is reachable. The exception: a domain's
sandbox-side tools (the request's "sandbox_tools", e.g. math's `python`) run here, inside the
sandbox, in a child process of their own under their own limits; each call is then reported to
the gateway so that it is counted and shows in the trace.
"""

import gc
import hashlib
import http.client
import io
import json
import os
import resource
import select
import selectors
import signal
import socket
import stat
import sys
import tempfile
import time
import traceback

TAIL_CHARS = 4000
LIMITS_BYTES = 128  # the first line of a rollout's request, padded to this length
MAX_ANSWER_CHARS = 65536
_token = None  # this worker's rollout token, set after the fork
_sandbox_tools = {}  # name -> limits of the tools that run in here, set after the fork
TOOL_OUTPUT_CHARS = 8000  # of stdout and of stderr, each, that a sandbox-side tool returns
# RLIMIT_CPU: SIGXCPU at the limit, SIGKILL this much later for a harness that ignores SIGXCPU.
# SIGXCPU is what names the limit: the kernel counts the limit in scheduler ticks, wait4 reports
# run time, and the two part under contention (a fork storm next door: 6 s of ticks, 3 s run).
CPU_GRACE_S = 2
ROLLOUT_UID_BASE = 200000  # "uid" scratch: rollout slot n runs as this + n, no user of the image
TMP_BYTES = 64 << 20  # "mount" scratch: the size of a rollout's own /tmp and /dev/shm
_libc = None  # set by confine
_rollout_filter = b""  # the full filter a worker loads once its namespaces are its own
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
# landlock_create_ruleset and landlock_restrict_self: the same numbers on every architecture
NR_LANDLOCK_CREATE_RULESET, NR_LANDLOCK_RESTRICT_SELF = 444, 446
LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, LANDLOCK_SCOPE_SIGNAL = 0x1, 0x2


class GatewayError(Exception):
    """The gateway refused a call; `reason` says why (budget, unknown_tool, bad_token...)."""

    def __init__(self, message, reason="gateway"):
        super().__init__(message)
        self.reason = reason


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("gateway", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def _post(path, body):
    conn = _UnixConnection(os.environ["WHALE_GATEWAY"], timeout=600)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={
                "Content-Type": "application/json",
                "Authorization": "Bearer " + _token,
            },
        )
        resp = conn.getresponse()
        data = json.loads(resp.read() or b"null")
    finally:
        conn.close()
    if resp.status != 200:
        data = data if isinstance(data, dict) else {"detail": data}
        raise GatewayError(data.get("detail"), data.get("reason") or "gateway")
    return data


class Message:
    """The assistant message of one model call."""

    def __init__(self, data):
        choice = data["choices"][0]
        msg = choice["message"]
        self.role = msg.get("role", "assistant")
        self.content = msg.get("content") or ""
        # what the server's reasoning parser split off (vLLM: reasoning_content or reasoning);
        # without a parser, thinking stays in content between <think> and </think>
        self.reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
        self.tool_calls = msg.get("tool_calls") or []
        self.finish_reason = choice.get("finish_reason")
        self.usage = data.get("usage") or {}

    def __repr__(self):
        return f"Message(content={self.content!r}, finish_reason={self.finish_reason!r})"


class LLM:
    def chat(self, messages, **sampling):
        return Message(_post("/v1/chat/completions", {"messages": messages, **sampling}))


class Tools:
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        if name in _sandbox_tools and name in SANDBOX_TOOLS:
            return lambda *args, **kwargs: _sandbox_call(name, args, kwargs)

        def call(*args, **kwargs):
            return _post(f"/tools/{name}", {"args": list(args), "kwargs": kwargs})["result"]

        return call


def _sandbox_call(name, args, kwargs):
    """Run a sandbox-side tool, then report the call to the gateway: it counts against the
    rollout's budget and becomes a step of its trace. A refused report (budget) fails the call."""
    start = time.monotonic()
    result = SANDBOX_TOOLS[name](*args, **kwargs, **_sandbox_tools[name])
    _post(
        f"/tools/{name}/record",
        {
            "args": list(args),
            "kwargs": kwargs,
            "result": result,
            "latency_ms": (time.monotonic() - start) * 1000,
        },
    )
    return result


def _truncate(data):
    text = data.decode(errors="replace")
    if len(text) <= TOOL_OUTPUT_CHARS:
        return text
    return text[:TOOL_OUTPUT_CHARS] + f"\n... [{len(text) - TOOL_OUTPUT_CHARS} more characters cut]"


def run_python(code, timeout_s=10.0, memory_mb=512):
    """Run `code` with this sandbox's Python in a child process of its own: a wall-clock limit,
    an address-space limit, stdout and stderr captured (cut to TOOL_OUTPUT_CHARS each).
    fork/exec rather than the subprocess module, which a domain may forbid to the harness."""
    if not isinstance(code, str):
        raise TypeError(f"python(code) takes the code as a string, not {type(code).__name__}")
    fd, path = tempfile.mkstemp(suffix=".py", prefix="tool-")  # under /tmp: the writable place
    try:
        with os.fdopen(fd, "w") as f:
            f.write(code)
        return _run_child([sys.executable, "-I", path], float(timeout_s), int(memory_mb) << 20)
    finally:
        os.unlink(path)


def _run_child(argv, timeout_s, memory_bytes):
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: limits, then exec
        try:
            # It stays in the worker's process group, so the rollout's end kills it and whatever
            # it started; its own timeout kills the child itself.
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, 65536)
            if memory_bytes:  # never above the rollout's own limit, which cannot be raised
                hard = resource.getrlimit(resource.RLIMIT_AS)[1]
                if hard != resource.RLIM_INFINITY:
                    memory_bytes = min(memory_bytes, hard)
                resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
            cpu = int(timeout_s) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    os.close(out_w)
    os.close(err_w)
    deadline = time.monotonic() + timeout_s
    chunks = {out_r: b"", err_r: b""}
    open_fds, timed_out = {out_r, err_r}, False
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                open_fds.discard(fd)
            elif len(chunks[fd]) <= 4 * TOOL_OUTPUT_CHARS:  # the rest is drained, not kept
                chunks[fd] += data
    status = None
    while not timed_out and status is None:  # output closed; the code may still be running
        done, status = os.waitpid(pid, os.WNOHANG)
        status = status if done else None
        if status is None:
            timed_out = time.monotonic() > deadline
            time.sleep(0.01)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    os.close(out_r)
    os.close(err_r)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    stderr = _truncate(chunks[err_r])
    if timed_out:
        stderr += f"\n[timed out after {timeout_s:g}s]"
    return {
        "stdout": _truncate(chunks[out_r]),
        "stderr": stderr,
        "exit_code": code,
        "timed_out": timed_out,
    }


SANDBOX_TOOLS = {"python": run_python}  # the tools a domain may ask to run inside the sandbox


class _Tail(io.TextIOBase):
    """Keeps only the last TAIL_CHARS written: a harness that prints gigabytes costs no memory."""

    def __init__(self):
        self.buf = ""

    def writable(self):
        return True

    def write(self, s):
        self.buf = (self.buf + str(s))[-TAIL_CHARS:]
        return len(s)


def _describe(exc, harness_path):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == harness_path]
    where = f" (harness line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def load_harness(harness_path):
    """(code object, None), or (None, the syntax error): what run_task needs of the file."""
    source = open(harness_path).read()
    try:
        return compile(source, harness_path, "exec"), None
    except SyntaxError as exc:
        return None, f"SyntaxError: {exc.msg} (harness line {exc.lineno})"


def run_task(harness_path, task, harness=None):
    """Run the harness on one task in this process; returns the result dict. `harness` is
    load_harness's result when the server compiled the file already."""
    out, err = _Tail(), _Tail()
    result = {"answer": None, "error": None, "reason": None}
    sys.stdout, sys.stderr = out, err
    try:
        code, syntax_error = harness or load_harness(harness_path)
        if syntax_error:
            result["reason"] = "syntax_error"
            result["error"] = syntax_error
        if code is not None:
            namespace = {"__name__": "harness", "__file__": harness_path}
            exec(code, namespace)
            if not callable(namespace.get("run")):
                result["reason"] = "no_run"
                result["error"] = "the harness defines no run(task, llm, tools) function"
            else:
                answer = namespace["run"](task, LLM(), Tools())
                result["answer"] = None if answer is None else str(answer)[:MAX_ANSWER_CHARS]
    except BaseException as exc:  # noqa: BLE001 - anything the harness raises is its failure
        if isinstance(exc, GatewayError):
            result["reason"] = exc.reason
        elif isinstance(exc, MemoryError):
            result["reason"] = "memory_limit"
        elif isinstance(exc, ForbiddenImport):
            result["reason"] = "forbidden_import"
        else:
            result["reason"] = "exception"
        result["error"] = _describe(exc, harness_path)
        err.write("".join(traceback.format_exception(exc)))
    result["stdout_tail"], result["stderr_tail"] = out.buf, err.buf
    return result


class ForbiddenImport(ImportError):
    pass


class _ForbiddenImports:
    """A meta-path finder that refuses the modules the domain forbids."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ForbiddenImport(f"import of {name!r} is not allowed in this domain")
        return None


def _forbid(names):
    if not names:
        return
    sys.meta_path.insert(0, _ForbiddenImports(names))
    # The runner itself already imported some of them (socket for the gateway): drop them from
    # the module cache so that `import` goes through the finder; the runner keeps its references.
    for loaded in list(sys.modules):
        if loaded.split(".")[0] in names:
            del sys.modules[loaded]


def confine(filter_path):
    """Before any harness code: make this process non-dumpable (processes of the same uid, i.e.
    sibling rollouts, can then neither open its /proc/PID/mem nor attach to it), forbid new
    privileges, and load the system-call filter the host compiled (sandbox/seccomp.py: no
    ptrace, no new namespaces...). All three pass to every process forked or exec'ed from here
    and cannot be undone (the filter also refuses PR_SET_DUMPABLE). A server that cannot
    confine itself refuses to run."""
    global _libc
    import ctypes

    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    # PR_SET_DUMPABLE 0, PR_SET_NO_NEW_PRIVS 1
    for option, arg in ((4, 0), (38, 1)):
        if _libc.prctl(option, arg, 0, 0, 0) != 0:
            raise SystemExit(f"runner: prctl({option}) failed: {os.strerror(ctypes.get_errno())}")
    try:
        _load_filter(_read_filter(filter_path))
    except OSError as exc:
        raise SystemExit(f"runner: cannot load the seccomp filter: {exc}") from None


def _read_filter(filter_path):
    with open(filter_path, "rb") as f:
        program = f.read()
    if not program or len(program) % 8:
        raise SystemExit(f"runner: {filter_path} is not a seccomp BPF program")
    return program


def _load_filter(program):
    """PR_SET_SECCOMP, SECCOMP_MODE_FILTER: stacks on any filter loaded before."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(code))
    if _libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def _libc_call(name, *args):
    import ctypes

    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def _own_namespaces(also_mounts=False):
    """A network and an IPC namespace of this worker's own (and a mount namespace): the server
    can make them (CAP_SYS_ADMIN in its user namespace), no rollout can. About a millisecond: a
    new network namespace is most of it. Its loopback stays down: nothing to listen on."""
    _libc_call("unshare", CLONE_NEWNET | CLONE_NEWIPC | (CLONE_NEWNS if also_mounts else 0))


def _landlock_scopes():
    """A Landlock domain of this worker's own in which abstract Unix sockets and signals reach
    nothing outside it (kernel 6.12+; no privilege needed): False where the kernel cannot."""
    import ctypes

    class RulesetAttr(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in ("fs", "net", "scoped")]

    attr = RulesetAttr(0, 0, LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL)
    _libc.syscall.restype = ctypes.c_long
    fd = _libc.syscall(NR_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if fd < 0:
        return False
    try:
        return _libc.syscall(NR_LANDLOCK_RESTRICT_SELF, fd, 0) == 0
    finally:
        os.close(fd)


def _private_mounts():
    """The "mount" scratch: a mount namespace of this worker's own with a new tmpfs on /tmp and
    /dev/shm, then no capabilities left and the full filter on top of the server's."""
    import ctypes

    _own_namespaces(also_mounts=True)
    _libc_call("mount", None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None)
    options = b"size=%d,mode=1777" % TMP_BYTES
    for target in (b"/tmp", b"/dev/shm"):
        _libc_call(
            "mount", b"tmpfs", target, b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV), options
        )
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    _libc_call("capset", header, (ctypes.c_uint32 * 6)())  # effective, permitted, inheritable: none
    _load_filter(_rollout_filter)


def _remove_tree(path, keep_top=False):
    """Delete what a rollout left under `path`, whatever modes it gave it (its owner may always
    change them back); symbolic links are removed, never followed."""
    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return
    if not is_dir:
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    try:
        os.chmod(path, 0o700)
        names = os.listdir(path)
    except OSError:
        names = []
    for name in names:
        _remove_tree(os.path.join(path, name))
    if not keep_top:
        try:
            os.rmdir(path)
        except OSError:
            pass


def _enter_scratch(scratch):
    """In the worker, before any harness code: make the rollout's fresh area and namespaces its
    own (see the module's docstring), and the area its working directory, HOME and TMPDIR."""
    if scratch["mode"] == "mount":
        _private_mounts()
    elif scratch["mode"] == "uid":
        uid = scratch["uid"]
        _own_namespaces()
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # and with it every capability the server had
        _load_filter(_rollout_filter)
    _landlock_scopes()
    path = scratch["path"]
    os.chdir(path)
    os.environ["HOME"] = os.environ["TMPDIR"] = path
    tempfile.tempdir = path  # the server may have cached another


def _clean_as(uid, path):
    """The cleaner of a "uid" rollout, a child of the server: under the rollout's uid, kill what it
    left running, then delete what it wrote. Never returns."""
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        for _ in range(2):  # kill(-1): every process this uid may signal, i.e. the rollout's
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _remove_tree(path, keep_top=True)
    finally:
        os._exit(0)


def _read_line(conn):
    """The host's second JSON line (blocking); the host sends nothing after it."""
    line = bytearray()
    while not line.endswith(b"\n"):
        data = conn.recv(1 << 16)
        if not data:
            raise ConnectionError("the host closed the connection")
        line += data
    return json.loads(line)


def _worker(harness_path, harness, limits, scratch, conn, out_w, err_w, res_w):
    """The forked child that runs the harness. Never returns."""
    global _token, _sandbox_tools
    try:
        signal.set_wakeup_fd(-1)  # the server's: the harness may reuse that descriptor number
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        conn.setblocking(True)
        request = {**_read_line(conn), **limits}  # the task and token: for this process only
        os.setsid()  # its own process group: the server kills everything it starts
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        # Close every other descriptor: the harness must not reach the control connection.
        os.closerange(3, res_w)
        os.closerange(res_w + 1, 65536)
        try:
            _enter_scratch(scratch)
        except OSError as exc:
            os.write(2, f"runner: cannot isolate the rollout: {exc}\n".encode())
            raise
        mem = int(request.get("memory_mb") or 0) << 20
        if mem:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        cpu = int(request.get("cpu_s") or float(request.get("wall_s") or 60) + 5)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + CPU_GRACE_S))
        _token = request["token"]
        _sandbox_tools = request.get("sandbox_tools") or {}
        _forbid(request.get("forbidden_modules"))
        result = run_task(harness_path, request["task"], harness)
        data = json.dumps(result).encode()
        while data:
            data = data[os.write(res_w, data) :]
    finally:
        os._exit(0)


def _spawn(harness_path, harness, limits, scratch, conn):
    """Fork the worker of one rollout; returns its pid and the read ends of its three pipes."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _worker(harness_path, harness, limits, scratch, conn, out_w, err_w, res_w)
    for fd in (out_w, err_w, res_w):
        os.close(fd)
    return pid, out_r, err_r, res_r


class _Rollout:
    """One rollout in flight: the host's connection, its worker, the worker's pipes and limits."""

    def __init__(self, conn, limits, scratch, pid, out_r, err_r, res_r):
        self.conn, self.pid, self.scratch = conn, pid, scratch
        self.out_r, self.err_r, self.res_r = out_r, err_r, res_r
        self.chunks = {out_r: b"", err_r: b"", res_r: b""}
        self.open = {out_r, err_r, res_r}
        self.start = time.monotonic()
        self.wall_s = limits["wall_s"]
        self.deadline = self.start + self.wall_s
        self.output_bytes = limits["output_bytes"]
        self.stop_hash = limits["stop"]  # the host stops the rollout with the key hashed here
        self.budget = self.output_bytes
        self.status = None  # the worker's wait status once it has exited
        # the worker's CPU limit, as it sets it on itself (_worker), and the CPU time it used
        self.cpu_s = limits["cpu_s"] or int(self.wall_s + 5)
        self.cpu_used = 0.0
        self.why = None  # "timeout", "output_limit" or "stopped": the rollout is stopped

    def read(self, fd):
        data = os.read(fd, 65536)
        if not data:
            self.open.discard(fd)
            return
        self.chunks[fd] += data
        if fd != self.res_r:
            self.budget -= len(data)
            self.chunks[fd] = self.chunks[fd][-TAIL_CHARS:]
            if self.budget < 0:
                self.why = "output_limit"

    @property
    def finished(self):
        """Stopped, or the worker is gone and said what it had to (stray children do not count)."""
        return self.why is not None or (self.status is not None and self.res_r not in self.open)

    def result(self):
        direct_out = self.chunks[self.out_r].decode(errors="replace")
        direct_err = self.chunks[self.err_r].decode(errors="replace")
        base = {
            "answer": None,
            "stdout_tail": direct_out,
            "stderr_tail": direct_err,
            "wall_s": time.monotonic() - self.start,
        }
        if self.why == "timeout":
            return {
                **base,
                "reason": "timeout",
                "error": f"wall-clock limit of {self.wall_s:g}s exceeded",
            }
        if self.why == "stopped":
            return {**base, "reason": "stopped", "error": "stopped by the host"}
        if self.why == "output_limit":
            return {
                **base,
                "reason": "output_limit",
                "error": f"output limit of {self.output_bytes} bytes exceeded",
            }
        try:
            result = json.loads(self.chunks[self.res_r])
        except ValueError:
            if os.WIFSIGNALED(self.status):
                sig = os.WTERMSIG(self.status)
                # SIGXCPU: the soft limit; SIGKILL: the hard one, for a harness that ignored
                # SIGXCPU (its run time then says so) or the host's OOM killer
                if sig == signal.SIGXCPU or (
                    sig == signal.SIGKILL and self.cpu_used >= self.cpu_s - 0.5
                ):
                    error = f"CPU time limit of {self.cpu_s}s exceeded (killed by signal {sig})"
                    return {**base, "reason": "cpu_limit", "error": error}
                hint = (
                    f" after {self.cpu_used:.1f}s of CPU time (out of memory?)"
                    if sig == signal.SIGKILL
                    else ""
                )
                error = f"sandbox ended without a result: killed by signal {sig}{hint}"
            else:
                error = f"sandbox ended without a result: exit code {os.WEXITSTATUS(self.status)}"
            return {**base, "reason": "crash", "error": error}
        result["stdout_tail"] = (direct_out + result["stdout_tail"])[-TAIL_CHARS:]
        result["stderr_tail"] = (direct_err + result["stderr_tail"])[-TAIL_CHARS:]
        result["wall_s"] = base["wall_s"]
        return result


class _Server:
    """One process, one event loop: it accepts rollouts, forks one worker each and enforces the
    worker's wall-clock and output limits from here (one fork per rollout, no supervisor).

    It is the sandbox's PID 1 (no init process runs beside it: an init would be a dumpable
    process of the sandbox user that any rollout could attach to), so it also reaps the orphans
    that rollouts leave: every SIGCHLD wakes the loop, which collects whichever children exited."""

    def __init__(self, listener, harness_path, harness, scratch_mode):
        self.listener, self.harness_path, self.harness = listener, harness_path, harness
        self.scratch_mode = scratch_mode
        self.slots = set()  # "uid" scratch: the slots of rollouts running or being cleaned
        self.cleaners = {}  # pid -> the scratch its cleaner empties
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, ("accept", None))
        self.rollouts = set()
        self.workers = {}  # pid -> its rollout, until the worker is reaped
        self.wake_r, wake_w = socket.socketpair()
        for end in (self.wake_r, wake_w):
            end.setblocking(False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the signal wakes us
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        self._wake_w = wake_w  # kept open for the life of the server
        self.selector.register(self.wake_r, selectors.EVENT_READ, ("child", None))

    def _reap(self):
        """Collect every child that has exited: a worker's status goes to its rollout; an orphan
        re-parented to this PID 1 is only collected."""
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            rollout = self.workers.pop(pid, None)
            if rollout is not None:
                rollout.status = status
                rollout.cpu_used = usage.ru_utime + usage.ru_stime
            scratch = self.cleaners.pop(pid, None)
            if scratch is not None:  # emptied: its directory goes, its uid may run again
                try:
                    os.rmdir(scratch["path"])
                except OSError:
                    pass
                self.slots.discard(scratch["slot"])

    def serve_forever(self):
        while True:
            for key, _ in self.selector.select(self._timeout()):
                kind, obj = key.data
                if kind == "accept":
                    self._accept()
                elif kind == "request":
                    self._read_limits(key.fileobj, obj)
                elif kind == "pipe":
                    obj.read(key.fd)
                    if key.fd not in obj.open:
                        self.selector.unregister(key.fd)
                elif kind == "child":
                    try:
                        while self.wake_r.recv(4096):
                            pass
                    except BlockingIOError:
                        pass
                    self._reap()
            now = time.monotonic()
            for rollout in list(self.rollouts):
                if rollout.why is None and now >= rollout.deadline:
                    rollout.why = "timeout"
                if rollout.finished:
                    self._finish(rollout)

    def _timeout(self):
        if not self.rollouts:
            return None
        return max(0.0, min(r.deadline for r in self.rollouts) - time.monotonic())

    def _accept(self):
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.setblocking(False)
        self.selector.register(conn, selectors.EVENT_READ, ("request", bytearray()))

    def _read_limits(self, conn, buffer):
        """Read the limits and not a byte more (the rest is the worker's): their line is padded
        to LIMITS_BYTES, so nothing past it is ever copied into this process, not even freed."""
        try:
            data = conn.recv(LIMITS_BYTES - len(buffer))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        buffer += data
        if data and len(buffer) < LIMITS_BYTES:
            return
        self.selector.unregister(conn)
        try:
            limits = json.loads(bytes(buffer))
            if "stop_key" in limits:
                self._stop(str(limits["stop_key"]))
                conn.close()
                return
            limits = {
                "wall_s": float(limits.get("wall_s") or 60),
                "cpu_s": int(limits.get("cpu_s") or 0),
                "output_bytes": int(limits.get("output_bytes") or (1 << 20)),
                "stop": str(limits.get("stop") or ""),
            }
        except (ValueError, TypeError, AttributeError):
            conn.close()  # not the host's pool: nothing to run
            return
        try:
            scratch = self._new_scratch()
        except OSError as exc:
            conn.setblocking(True)
            reply = {"answer": None, "reason": "crash", "error": f"no scratch space: {exc}"}
            try:
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                pass
            conn.close()
            return
        pid, out_r, err_r, res_r = _spawn(self.harness_path, self.harness, limits, scratch, conn)
        conn.setblocking(True)
        rollout = _Rollout(conn, limits, scratch, pid, out_r, err_r, res_r)
        for fd in (out_r, err_r, res_r):
            self.selector.register(fd, selectors.EVENT_READ, ("pipe", rollout))
        self.rollouts.add(rollout)
        self.workers[pid] = rollout
        self._reap()  # a worker that exited before it was registered

    def _new_scratch(self):
        """The fresh area of the next rollout (see the module's docstring)."""
        if self.scratch_mode == "mount":
            return {"mode": "mount", "path": "/tmp"}
        if self.scratch_mode == "uid":
            slot = next(n for n in range(len(self.slots) + 1) if n not in self.slots)
            uid = ROLLOUT_UID_BASE + slot
            # /tmp is root's and mode 0711: no rollout can list it or write to it, only to its
            # own directory, whose name it cannot guess
            path = f"/tmp/rollout-{os.urandom(16).hex()}"
            os.mkdir(path, 0o700)
            os.chown(path, uid, uid)
            self.slots.add(slot)
            return {"mode": "uid", "path": path, "uid": uid, "slot": slot}
        return {"mode": "dir", "path": tempfile.mkdtemp(prefix="whale-rollout-")}

    def _clear_scratch(self, scratch):
        if scratch["mode"] == "dir":
            _remove_tree(scratch["path"])
        elif scratch["mode"] == "uid":
            pid = os.fork()
            if pid == 0:
                _clean_as(scratch["uid"], scratch["path"])
            self.cleaners[pid] = scratch  # reaped by _reap, which then frees the slot

    def _stop(self, key):
        """The host stops a rollout (its harness time is up): it sends the key whose hash came
        with the rollout's limits. Only the hash is in this process, and so in the workers
        forked from it: no rollout can stop another."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:32]
        for rollout in self.rollouts:
            if rollout.stop_hash and rollout.stop_hash == digest and rollout.why is None:
                rollout.why = "stopped"

    def _finish(self, rollout):
        self.rollouts.discard(rollout)
        try:  # the worker's whole process group: whatever it started goes with it
            os.killpg(rollout.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if rollout.status is None:
            _, rollout.status, usage = os.wait4(rollout.pid, 0)
            rollout.cpu_used = usage.ru_utime + usage.ru_stime
            self.workers.pop(rollout.pid, None)
        for fd in (rollout.out_r, rollout.err_r, rollout.res_r):
            if fd in self.selector.get_map():
                self.selector.unregister(fd)
            os.close(fd)
        try:
            rollout.conn.sendall(json.dumps(rollout.result()).encode() + b"\n")
        except OSError:
            pass  # the host gave up on it (its own backstop timeout)
        rollout.conn.close()
        self._clear_scratch(rollout.scratch)  # once the host has its answer


def serve(control_socket, harness_path):
    global _rollout_filter
    scratch_mode = os.environ.get("WHALE_SCRATCH", "dir")
    if scratch_mode not in ("mount", "uid", "dir"):
        raise SystemExit(f"runner: WHALE_SCRATCH={scratch_mode!r} is not mount, uid or dir")
    if scratch_mode in ("mount", "uid"):  # the server keeps what it needs to isolate a worker
        _rollout_filter = _read_filter(os.environ["WHALE_SECCOMP"])
        confine(os.environ["WHALE_SECCOMP_SERVER"])
    else:
        confine(os.environ["WHALE_SECCOMP"])
    if scratch_mode == "uid":  # whatever the runtime made of it: only root may list or write
        os.chmod("/tmp", 0o711)
    try:
        harness = load_harness(harness_path)  # once per server, not per rollout
    except Exception:  # noqa: BLE001 - unreadable: each rollout reports it
        harness = None
    # Listen under a temporary name, then rename: the socket appears only once it accepts.
    pending = control_socket + ".pending"
    for path in (pending, control_socket):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(pending)
    listener.listen(256)  # many rollouts connect at the same moment
    listener.setblocking(False)
    os.chmod(pending, 0o666)
    os.rename(pending, control_socket)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    gc.freeze()  # the server's objects stay out of the workers' collections: fewer copied pages
    _Server(listener, harness_path, harness, scratch_mode).serve_forever()


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"] or len(sys.argv) != 4:
        sys.exit("usage: runner.py serve CONTROL_SOCKET HARNESS_PATH")
    serve(sys.argv[2], sys.argv[3])
