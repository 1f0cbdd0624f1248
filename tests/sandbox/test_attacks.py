"""The attack suite: hostile harnesses run the way a user would run them,
`whale eval hostile.py --domain arith --sandbox BACKEND`, while `whale serve` runs over the same
store. Each ends as a failed or contained rollout with a recorded reason; afterwards the server
still serves, the database is intact and the host is unchanged."""

import ctypes
import json
import os
import sqlite3
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.conftest import AUTH, whale_eval_json, whale_serve

# the module's tests share one warm pool per backend: under xdist they run on one worker
pytestmark = pytest.mark.xdist_group("attacks")

SECRET = "s3cret-in-the-server-env"
# The harness time limit of an attack meant to answer: far above what it needs, as a machine
# busy with other tests can hold a rollout's process for seconds. One meant to run forever is
# given HANG_S, to end soon.
ANSWER_S = 30
HANG_S = 4
# Put before a harness whose rollouts must overlap: all_up(n) waits until n - 1 siblings (the
# other workers of the same runner server) are running and returns their pids, or [] after 6 s;
# all_done(pids) marks this rollout done and waits until those siblings are done or gone. Events
# in /proc, not sleeps: on a loaded machine a sibling can start late. A rollout marks itself done
# by lowering its own priority (its nice value rises above its runner's), which every sibling
# reads in /proc/PID/stat: rollouts share no socket, file or IPC namespace to say it through.
RENDEZVOUS = """\
import os as _os, time as _time


def _stat(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _parent(pid):
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def _nice(pid):
    fields = _stat(pid)
    return int(fields[16]) if fields else None


def all_up(n, wait_s=6.0):
    me, server, end = _os.getpid(), _os.getppid(), _time.monotonic() + wait_s
    while _time.monotonic() < end:
        pids = [int(p) for p in _os.listdir("/proc")
                if p.isdigit() and int(p) != me and _parent(int(p)) == server]
        if len(pids) >= n - 1:
            return pids
        _time.sleep(0.05)
    return []


def _is_done(pid, server_nice):
    nice = _nice(pid)
    return nice is None or nice > server_nice


def all_done(pids, wait_s=6.0):
    server_nice = _nice(_os.getppid())
    _os.nice(1)
    end = _time.monotonic() + wait_s
    while _time.monotonic() < end and not all(_is_done(p, server_nice) for p in pids):
        _time.sleep(0.05)


"""


@pytest.fixture(scope="module", params=["process", "docker"])
def attack(request, tmp_path_factory, model_server, model_cache):
    """attack(code, limit=1, k=1, timeout_s=ANSWER_S, more_env=None) -> (eval JSON, [rollout rows
    as dicts]) on one backend."""
    backend = request.param
    if backend == "docker":
        request.getfixturevalue("docker_image")  # skips where no engine exists
    root = tmp_path_factory.mktemp(f"attacks-{backend}")
    home = root / "home"
    env = {
        **os.environ,
        "WHALE_HOME": str(home),
        "WHALE_MODEL_CACHE": str(model_cache),
        "WHALE_LLM_URL": model_server.base_url,
        "WHALE_LLM_MODEL": model_server.model,
        "WHALE_ROLLOUT_MAX_CALLS": "4",
        "WHALE_TEST_SECRET": SECRET,
    }
    model_port = model_server.base_url.split(":")[-1].split("/")[0]

    with whale_serve(env) as url:

        def run(
            code: str,
            limit: int = 1,
            k: int = 1,
            timeout_s: float = ANSWER_S,
            more_env: dict[str, str] | None = None,
        ):
            code = code.replace("SERVER_PORT", url.rsplit(":", 1)[1]).replace(
                "MODEL_PORT", model_port
            )
            harness = root / "hostile.py"
            harness.write_text(textwrap.dedent(code.replace("DB_PATH", str(home / "whale.db"))))
            out = whale_eval_json(
                harness,
                {**env, "WHALE_ROLLOUT_TIMEOUT": str(timeout_s), **(more_env or {})},
                "--domain",
                "arith",
                "--sandbox",
                backend,
                "--limit",
                str(limit),
                "-k",
                str(k),
            )
            with sqlite3.connect(home / "whale.db") as db:
                db.row_factory = sqlite3.Row
                rows = [
                    dict(r)
                    for r in db.execute(
                        "SELECT * FROM rollout WHERE run_id = ? ORDER BY id", (out["run_id"],)
                    )
                ]
            assert len(rows) == limit * k and all(r["status"] != "pending" for r in rows)
            # the server keeps serving and sees the run
            runs = httpx.get(f"{url}/api/runs", headers=AUTH, timeout=10).json()["runs"]
            assert out["run_id"] in {r["id"] for r in runs}
            return out, rows

        run.backend = backend
        run.home = home
        yield run
    with sqlite3.connect(home / "whale.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def answer_of(attack, code: str) -> str:
    _, (row,) = attack(code)
    assert row["reason"] is None, row["error"]
    return row["answer"]


def test_no_network_at_all(attack):
    answer = answer_of(
        attack,
        """
        import socket
        def run(task, llm, tools):
            # no interface but loopback, and no name resolution: nothing can leave
            names = sorted(name for _, name in socket.if_nameindex())
            try:
                socket.getaddrinfo("deb.debian.org", 80)
                dns = "resolves"
            except OSError:
                dns = "no-dns"
            return ",".join(names) + ";" + dns
    """,
    )
    assert answer in ("lo;no-dns", ";no-dns")


@pytest.mark.parametrize(
    "target", ["SERVER_PORT", "MODEL_PORT"], ids=["own-server", "model-server"]
)
def test_loopback_servers_are_unreachable(attack, target):
    answer = answer_of(
        attack,
        f"""
        import socket
        def run(task, llm, tools):
            try:
                socket.create_connection(("127.0.0.1", {target}), timeout=2)
                return "connected"
            except OSError as exc:
                return "blocked " + type(exc).__name__
    """,
    )
    assert answer.startswith("blocked")


def test_host_files_are_out_of_reach(attack):
    answer = answer_of(
        attack,
        """
        import os
        def run(task, llm, tools):
            seen = []
            for path in ["DB_PATH", "/etc/shadow", "/root/.cache", "/root/.bash_history",
                         "/var/lib/docker", "/work"]:
                try:
                    with open(path, "rb") as f:
                        f.read(1)
                    seen.append(path)
                except IsADirectoryError:
                    seen.append(path)
                except OSError:
                    pass
            return ",".join(seen) or "nothing"
    """,
    )
    assert answer == "nothing"


def test_the_server_environment_is_not_inherited(attack):
    answer = answer_of(
        attack,
        """
        import os
        def run(task, llm, tools):
            return repr(dict(os.environ))
    """,
    )
    assert SECRET not in answer
    assert "WHALE_LLM_URL" not in answer and "WHALE_HOME" not in answer


def test_nothing_outside_tmp_is_writable(attack):
    answer = answer_of(
        attack,
        """
        import os, tempfile
        def run(task, llm, tools):
            wrote = []
            for path in ["/usr/owned", "/etc/owned", "/sandbox/harness.py", "/owned",
                         "/gateway/owned", "/sandbox/runner.py", "/dev/owned"]:
                try:
                    with open(path, "a") as f:
                        f.write("x")
                    wrote.append(path)
                except OSError:
                    pass
            open(os.path.join(tempfile.gettempdir(), "fine"), "w").write("ok")  # its own area
            return ",".join(wrote) or "nothing"
    """,
    )
    assert answer == "nothing"
    assert not Path("/usr/owned").exists() and not Path("/etc/owned").exists()


def test_filling_tmp_stops_at_its_size(attack):
    answer = answer_of(
        attack,
        """
        import tempfile
        def run(task, llm, tools):
            written = 0
            try:
                for i in range(10_000):
                    with open(f"{tempfile.gettempdir()}/fill{i}", "wb") as f:
                        f.write(b"x" * (1 << 20))
                    written += 1
            except OSError:
                pass
            return written
    """,
    )
    assert 0 < int(answer) <= 64


def test_printing_gigabytes(attack):
    _, (row,) = attack("""
        import os
        def run(task, llm, tools):
            while True:
                os.write(1, b"x" * (1 << 20))
    """)
    assert row["reason"] == "output_limit"


def test_fork_bomb_is_contained(attack):
    out, rows = attack(
        """
        import os
        def run(task, llm, tools):
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
    """,
        limit=2,
        timeout_s=HANG_S,
    )
    assert {r["reason"] for r in rows} <= {"timeout", "crash", "exception"}
    # and the sandbox still works afterwards
    out, (row,) = attack("def run(task, llm, tools):\n    return 1\n")
    assert row["answer"] == "1"


def test_allocating_10_gb(attack):
    _, (row,) = attack("def run(task, llm, tools):\n    return len(bytearray(10 * 1024**3))\n")
    assert row["reason"] == "memory_limit"


@pytest.mark.parametrize(
    "code",
    [
        "def run(task, llm, tools):\n    while True:\n        pass\n",
        "import signal, time\ndef run(task, llm, tools):\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    time.sleep(3600)\n",
    ],
    ids=["spin", "sleep-ignoring-sigterm"],
)
def test_running_forever(attack, code):
    _, (row,) = attack(code, timeout_s=HANG_S)
    assert row["reason"] == "timeout"
    assert row["wall_s"] < 15


def test_forged_token_is_refused(attack):
    _, (row,) = attack("""
        import http.client, json, socket
        class Conn(http.client.HTTPConnection):
            def connect(self):
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.connect("/gateway/gateway.sock")
        def run(task, llm, tools):
            conn = Conn("gateway")
            conn.request("POST", "/v1/chat/completions", json.dumps({"messages": []}),
                         {"Authorization": "Bearer forged", "Content-Type": "application/json"})
            return conn.getresponse().status
    """)
    assert row["answer"] == "401"
    with sqlite3.connect(attack.home / "whale.db") as db:
        assert (
            db.execute("SELECT count(*) FROM step WHERE rollout_id = ?", (row["id"],)).fetchone()[0]
            == 0
        )


def test_sibling_rollouts_cannot_read_each_others_memory(attack):
    """Rollouts of one harness share a warm sandbox; their tokens stay private all the same."""
    _, rows = attack(
        RENDEZVOUS
        + textwrap.dedent("""
        import os
        def run(task, llm, tools):
            siblings = all_up(3)
            if not siblings:
                return "no sibling running"
            readable = []
            for pid in os.listdir("/proc"):
                if pid.isdigit() and int(pid) != os.getpid():
                    try:
                        with open(f"/proc/{pid}/mem", "rb") as f:
                            f.read(1)
                        readable.append(pid)
                    except OSError:
                        pass
                    try:
                        if "Bearer" in open(f"/proc/{pid}/environ").read():
                            readable.append(pid + "-env")
                    except OSError:
                        pass
            all_done(siblings)
            return ",".join(readable) or "none"
    """),
        limit=3,
    )
    assert [r["answer"] for r in rows] == ["none"] * 3, [r["error"] for r in rows]


def test_a_rollout_finds_no_sibling_token_in_its_own_memory(attack):
    """A worker is a fork of its runner server: whatever the server held when it forked (the
    requests of rollouts already in flight) would be readable in the worker's own memory. The
    server never reads a rollout's task or token, so a later sibling finds only its own."""
    _, rows = attack(
        RENDEZVOUS
        + textwrap.dedent("""
        import re, sys
        def run(task, llm, tools):
            siblings = all_up(4)  # each later one forked while the earlier were in flight
            if not siblings:
                return "no sibling running"
            mine = sys.modules["__main__"]._token
            found = set()
            with open("/proc/self/maps") as maps:
                regions = [line.split() for line in maps]
            try:
                mem = open("/proc/self/mem", "rb", buffering=0)
            except PermissionError:  # docker: a non-dumpable process cannot read even itself
                all_done(siblings)
                return "unreadable"
            with mem:
                for region in regions:
                    start, end = (int(x, 16) for x in region[0].split("-"))
                    if not region[1].startswith("rw") or end - start > 1 << 28:
                        continue
                    try:
                        mem.seek(start)
                        data = mem.read(end - start)
                    except (OSError, ValueError, OverflowError):
                        continue
                    found.update(m.decode() for m in re.findall(rb'"token": "([A-Za-z0-9_-]{32})"', data))
            foreign = found - {mine}
            all_done(siblings)
            return f"{len(foreign)} foreign"
    """),
        limit=4,
    )
    answers = [r["answer"] for r in rows]
    assert answers == ["0 foreign"] * 4 or (
        attack.backend == "docker" and answers == ["unreadable"] * 4
    ), [r["error"] for r in rows]


def test_a_rollout_cannot_stop_a_sibling(attack):
    """The host stops a rollout whose harness time is up by sending the runner a key; the
    runner keeps only the key's hash, so a later fork finds the hashes of its siblings in its
    copy of the runner's memory, and sends them as keys, to no effect."""
    _, rows = attack(
        RENDEZVOUS
        + textwrap.dedent("""
        import json, socket, sys, time
        def run(task, llm, tools):
            siblings = all_up(4)
            frame, server = sys._getframe(), None
            while frame is not None and server is None:
                candidate = frame.f_locals.get("self")
                if hasattr(candidate, "rollouts"):
                    server = candidate
                frame = frame.f_back
            hashes = [r.stop_hash for r in server.rollouts] if server else []
            for key in hashes:
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.connect("/control/runner.sock")
                conn.sendall(json.dumps({"stop_key": key}).ljust(127).encode() + b"\\n")
                conn.close()
            time.sleep(1.0)  # long enough for a stop to land, were one to work
            all_done(siblings)
            return f"{len(hashes)} sent"
    """),
        limit=4,
    )
    assert all(r["reason"] is None for r in rows), [r["error"] for r in rows]
    sent = [int(r["answer"].split()[0]) for r in rows]
    assert sum(sent) > 0, sent  # later forks did find their siblings' hashes


def test_model_call_budget(attack):
    _, (row,) = attack("""
        def run(task, llm, tools):
            while True:
                llm.chat([{"role": "user", "content": "hi"}], max_tokens=1)
    """)
    assert row["reason"] == "budget"
    assert row["turns"] == 4  # WHALE_ROLLOUT_MAX_CALLS


def test_forbidden_module(attack):
    _, (row,) = attack("import subprocess\ndef run(task, llm, tools):\n    return 1\n")
    assert row["reason"] == "forbidden_import"
    assert "subprocess" in row["error"]


def test_a_fake_reward_cannot_be_reported(attack):
    """The reward is computed outside the sandbox from the answer; tampering changes nothing. The
    forgeries carry the correct answer (the harness works it out) while run returns a wrong one:
    a forgery that took effect would score 1."""
    _, (row,) = attack("""
        import json, os, sys
        def run(task, llm, tools):
            a, op, b = task["question"].removeprefix("What is ").removesuffix("?").split()
            correct = str({"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op])
            forged = {"answer": correct, "reason": None, "error": None, "reward": 1.0,
                      "status": "pass", "stdout_tail": "", "stderr_tail": ""}
            main = sys.modules.get("__main__")
            if main is not None:  # patch the runner's result
                main.run_task = lambda *a: forged
            for fd in range(3, 64):  # and try every descriptor for a result channel
                try:
                    os.write(fd, json.dumps(forged).encode() + b"\\n")
                except OSError:
                    pass
            return "-1"
    """)
    # writing into its own result channel can only spoil its own result
    assert row["status"] in ("fail", "error") and row["reward"] == 0.0
    assert row["answer"] in (None, "-1") and row["gold"] != "-1"


# A child interpreter started from the harness: the domain's forbidden imports do not reach it
# (they are a hint to the harness author, not a boundary), so only the sandbox can stop it.
# It tries the kernel interfaces an escape or a takeover of the runner would use and reports,
# per attempt, "ok" or the error name; every attempt must fail.
CHILD_ATTACKS = r"""
import ctypes, errno, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"x86_64": {"keyctl": 250, "bpf": 321, "perf_event_open": 298, "process_vm_readv": 310},
      "aarch64": {"keyctl": 219, "bpf": 280, "perf_event_open": 241, "process_vm_readv": 270}
      }[platform.machine()]

def outcome(result):
    return "ok" if result != -1 else errno.errorcode.get(ctypes.get_errno(), "?")

def ppid_of(pid):
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except OSError:  # gone meanwhile
        return None

worker = os.getppid()
server = ppid_of(worker)
siblings = [int(p) for p in os.listdir("/proc")
            if p.isdigit() and int(p) not in (worker, os.getpid()) and ppid_of(int(p)) == server]
found = {}
for name, pid in (("pid1", 1), ("server", server), ("sibling", siblings[0] if siblings else None)):
    if pid is None:
        found[name] = "no sibling running"
        continue
    attached = libc.ptrace(ctypes.c_long(16), ctypes.c_long(pid), None, None)  # PTRACE_ATTACH
    found[f"ptrace {name}"] = outcome(attached)
    if attached == 0:
        os.waitpid(pid, 0)
        libc.ptrace(ctypes.c_long(17), ctypes.c_long(pid), None, None)  # PTRACE_DETACH
    try:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            found[f"mem {name}"] = "ok"
    except OSError as exc:
        found[f"mem {name}"] = errno.errorcode[exc.errno]
    buf = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
    remote = (ctypes.c_void_p * 2)(0x10000, 8)
    found[f"process_vm_readv {name}"] = outcome(libc.syscall(
        NR["process_vm_readv"], pid, local, 1, remote, 1, 0))  # EFAULT: it reached the memory
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
found["setns"] = outcome(libc.setns(fd, 0))
found["unshare user"] = outcome(libc.unshare(0x10000000))  # then root in it, and so:
found["unshare net"] = outcome(libc.unshare(0x40000000))
found["mount"] = outcome(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
found["chroot"] = outcome(libc.chroot(b"/tmp"))
found["keyctl"] = outcome(libc.syscall(NR["keyctl"], 0, -3, 0))  # the session keyring's id
attr = ctypes.create_string_buffer(128)
found["bpf"] = outcome(libc.syscall(NR["bpf"], 0, attr, 128))  # EINVAL: the kernel looked at it
found["perf_event_open"] = outcome(libc.syscall(NR["perf_event_open"], attr, 0, -1, -1, 0))
print(json.dumps(found))
"""


def test_a_child_interpreter_can_neither_take_over_the_runner_nor_open_kernel_surfaces(attack):
    """ptrace, /proc/PID/mem and process_vm_readv against PID 1, the runner server and a
    sibling rollout; new user and network namespaces, chroot, mount, setns, keyctl, bpf and
    perf_event_open: all refused, on both backends (non-dumpable processes + seccomp filter)."""
    _, rows = attack(
        RENDEZVOUS
        + textwrap.dedent(f"""
        import os, sys
        CHILD = {CHILD_ATTACKS!r}
        def run(task, llm, tools):
            siblings = all_up(2)  # both rollouts are up: each is the other's sibling
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.dup2(write, 1)
                os.execv(sys.executable, [sys.executable, "-I", "-c", CHILD])
            os.close(write)
            out = b""
            while chunk := os.read(read, 65536):
                out += chunk
            os.waitpid(pid, 0)
            all_done(siblings)  # stay up while the sibling attacks this one
            return out.decode()
    """),
        limit=2,
    )
    allowed = {"EPERM", "EACCES", "ENOSYS"}
    for row in rows:
        assert row["reason"] is None, row["error"]
        found = json.loads(row["answer"])
        assert "no sibling running" not in found.values(), found
        breached = {name: what for name, what in found.items() if what not in allowed}
        assert not breached, f"{attack.backend}: {breached} (all: {found})"


# Leaves files in /tmp, /dev/shm, its working directory and $HOME (named after its pid, and under
# a fixed name too unless told not to), and looks for what other rollouts left there: by listing,
# or where a place cannot be listed, by the fixed name and the names of the pids it is given.
LEAVE_AND_LOOK = """\
import json, os

MARK = "whale-left-behind"


def places():
    return sorted({"/tmp", "/dev/shm", os.getcwd(), os.path.expanduser("~")})


def look(others=()):
    mine = f"{MARK}-{os.getpid()}"
    found = []
    for place in places():
        try:
            names = set(os.listdir(place))
        except OSError:
            names = set()
        for name in [MARK] + [f"{MARK}-{pid}" for pid in others]:
            if os.path.exists(os.path.join(place, name)):
                names.add(name)
        found += [os.path.join(place, n) for n in sorted(names) if n.startswith(MARK) and n != mine]
    return found


def leave(fixed_name=True):
    left = set()
    for place in places():
        for name in [f"{MARK}-{os.getpid()}"] + ([MARK] if fixed_name else []):
            try:
                with open(os.path.join(place, name), "w") as f:
                    f.write("left by an earlier rollout")
                left.add(place)
            except OSError:
                pass
    return sorted(left)


"""


def _leftovers(rows):
    """Each row's report, after checking that it left files in its own area at least."""
    reports = []
    for row in rows:
        assert row["reason"] is None, row["error"]
        report = json.loads(row["answer"])
        assert report["cwd"] in report["left"] and report["home"] in report["left"], report
        reports.append(report)
    return reports


def test_a_rollout_finds_nothing_an_earlier_one_left(attack):
    """One rollout at a time, all in the one warm runner: the second sample of a task and the
    next task's samples find none of the files the rollouts before them left."""
    _, rows = attack(
        LEAVE_AND_LOOK
        + textwrap.dedent("""
        def run(task, llm, tools):
            found = look()
            return json.dumps({"found": found, "left": leave(), "cwd": os.getcwd(),
                               "home": os.path.expanduser("~")})
    """),
        limit=2,
        k=2,
        more_env={"WHALE_CONCURRENCY": "1"},
    )
    assert [r["found"] for r in _leftovers(rows)] == [[]] * 4


def test_rollouts_running_together_find_nothing_of_each_other(attack):
    """The k samples of a task and another task's, at once in one runner: each leaves its files,
    waits until the others have left theirs, and finds none of them."""
    _, rows = attack(
        RENDEZVOUS
        + LEAVE_AND_LOOK
        + textwrap.dedent("""
        def run(task, llm, tools):
            left = leave(fixed_name=False)  # one name would be a sibling's and this one's
            siblings = all_up(4)
            found = look(siblings)
            all_done(siblings)
            return json.dumps({"found": found, "left": left, "siblings": len(siblings),
                               "cwd": os.getcwd(), "home": os.path.expanduser("~")})
    """),
        limit=2,
        k=2,
    )
    reports = _leftovers(rows)
    assert [r["siblings"] for r in reports] == [3] * 4, reports
    assert [r["found"] for r in reports] == [[]] * 4, reports


# Tries every channel that does not go through a file to reach a sibling running at the same
# time: a fixed abstract Unix socket name and a fixed loopback TCP port (the first rollout there
# listens, a later one finds the place taken and connects), System V shared memory and message
# queues created by a child program (util-linux's ipcmk, written in C: the domain's import filter
# does not reach it) and from Python in the rollout itself (through the runner's own ctypes, which
# the import filter does not stop either): a fixed key taken already, or a segment or queue in
# /proc/sysvipc that the rollout did not create, means a sibling's was within reach. And a signal
# sent to each sibling, which would note it.
MEET = """\
import errno, json, os, signal, socket, sys, threading, time

PORT = 47145
NAME = "\\0whale-meet"
KEYS = {"shm": 0x57484C31, "msg": 0x57484C32}
IPC_CREAT, IPC_EXCL = 0o1000, 0o2000
mark = f"{os.getpid()}-{os.urandom(4).hex()}"
met = []  # how this rollout reached a sibling, or was reached by one
signal.signal(signal.SIGUSR1, lambda *_: met.append("signal: reached by a sibling"))


def signal_each(pids):
    outcomes = set()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGUSR1)
            met.append(f"signal: reached {pid}")
            outcomes.add("sent")
        except OSError as exc:
            outcomes.add(errno.errorcode.get(exc.errno, "?"))
    return sorted(outcomes)


def _serve(listener, channel):
    while True:
        conn, _ = listener.accept()
        conn.settimeout(3)
        try:
            conn.sendall(mark.encode())
            met.append(f"{channel}: reached by {conn.recv(64).decode()}")
        except OSError:
            pass
        conn.close()


def bind_or_connect(family, address, channel):
    listener = socket.socket(family)
    try:
        listener.bind(address)
        listener.listen(16)
        threading.Thread(target=_serve, args=(listener, channel), daemon=True).start()
        return "bound"
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            return "bind " + errno.errorcode.get(exc.errno, "?")
    conn = socket.socket(family)
    conn.settimeout(3)
    try:
        conn.connect(address)
        conn.sendall(mark.encode())
        met.append(f"{channel}: reached {conn.recv(64).decode()}")
        return "connected"
    except OSError as exc:
        return "connect " + errno.errorcode.get(exc.errno, "?")


def ipcmk(option):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(write, 1)
        os.execv("/usr/bin/ipcmk", ["ipcmk", option, "4096"] if option == "-M" else ["ipcmk", option])
    os.close(write)
    out = b""
    while chunk := os.read(read, 4096):
        out += chunk
    os.waitpid(pid, 0)
    return int(out.split(b":")[-1])  # "Shared memory id: 5"


def by_key_from_python():
    libc = sys.modules["__main__"]._libc  # the runner's ctypes: no import needed
    get_errno = type(libc).__init__.__globals__["get_errno"]
    found = {}
    for kind, call in (("shm", lambda k, f: libc.shmget(k, 4096, f)),
                       ("msg", lambda k, f: libc.msgget(k, f))):
        ipc_id = call(KEYS[kind], IPC_CREAT | IPC_EXCL | 0o666)
        if ipc_id >= 0:
            found[kind] = ipc_id
        else:
            error = errno.errorcode.get(get_errno(), "?")
            found[kind] = None
            if error == "EEXIST":
                met.append(f"{kind} key {KEYS[kind]:#x}: a sibling created it")
    return found


def foreign_ipc(mine):
    for kind in ("shm", "msg"):
        with open(f"/proc/sysvipc/{kind}") as f:
            ids = {int(line.split()[1]) for line in list(f)[1:]}
        if ids - mine[kind]:
            met.append(f"{kind}: sees ids {sorted(ids - mine[kind])} it did not create")


"""


def _landlock_abi() -> int:
    """The kernel's Landlock ABI version (6 and up scope abstract sockets and signals), or 0."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, libc.syscall(444, None, 0, 1))  # LANDLOCK_CREATE_RULESET_VERSION


def test_rollouts_running_together_cannot_reach_each_other(attack):
    """k=4 samples of 2 tasks, all in flight at once in one warm runner: each tries to meet a
    sibling on an abstract Unix socket, a loopback TCP port and System V shared memory and
    message queues (made by a child program and from Python), and by signals. Each rollout has a
    network and an IPC namespace of its own (and no uid or Landlock domain that a sibling may
    signal): none reaches another, and every one of them did try."""
    _, rows = attack(
        RENDEZVOUS
        + MEET
        + textwrap.dedent("""
        def run(task, llm, tools):
            start = time.time()
            made = {"shm": {ipcmk("-M")}, "msg": {ipcmk("-Q")}}
            from_python = by_key_from_python()
            for kind, ipc_id in from_python.items():
                if ipc_id is not None:
                    made[kind].add(ipc_id)
            siblings = all_up(8, wait_s=20)
            tried = {"abstract": bind_or_connect(socket.AF_UNIX, NAME, "abstract"),
                     "tcp": bind_or_connect(socket.AF_INET, ("127.0.0.1", PORT), "tcp"),
                     "python": from_python, "signal": signal_each(siblings)}
            foreign_ipc(made)
            all_done(siblings, wait_s=20)
            return json.dumps({"met": met, "tried": tried, "siblings": len(siblings),
                               "start": start, "end": time.time()})
    """),
        limit=2,
        k=4,
    )
    assert all(r["reason"] is None for r in rows), [r["error"] for r in rows]
    reports = [json.loads(r["answer"]) for r in rows]
    # all eight in flight at once: each saw the seven others, and their spans overlap
    assert [r["siblings"] for r in reports] == [7] * 8, reports
    assert max(r["start"] for r in reports) < min(r["end"] for r in reports), reports
    met = [r["met"] for r in reports]
    if attack.backend == "process" and _landlock_abi() < 6:  # no scope for signals (documented)
        met = [[m for m in ms if not m.startswith("signal")] for ms in met]
    assert met == [[]] * 8, f"{attack.backend}: {met} (tried: {[r['tried'] for r in reports]})"
    # every rollout did make its own IPC objects and its own abstract socket
    for report in reports:
        assert report["tried"]["abstract"] == "bound", report
        assert None not in report["tried"]["python"].values(), report
