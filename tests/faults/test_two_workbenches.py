"""Two workbenches on one store, as a user starts them: `whale run` twice, `whale serve` while
`whale run` drives, `whale serve` twice on different ports, `whale run` or `whale demo` while
`whale serve` drives. Exactly one drives the run; every other one exits at once naming the holder's pid."""

import asyncio
import signal
import sqlite3
import subprocess

from app import control
from app.db import Writer, open_engine
from app.interrupts import TERMINATED
from app.llm.local import free_port
from tests.conftest import WHALE
from tests.loop.conftest import quick_toml, store_invariants
from tests.loop.test_crash import serve, wait_for

IN_FLIGHT = "SELECT count(*) > 0 FROM rollout WHERE status = 'pending'"


def steer(db, action: str) -> None:
    """What `whale pause|resume 1` writes, without the command's start-up time."""
    engine = open_engine(db)
    writer = Writer(engine)
    try:
        asyncio.run(control.apply(writer, 1, action, "test", "cli"))
    finally:
        writer.close()
        engine.dispose()


def all_refused(holder: int, home, commands: list[list[str]], env) -> None:
    """Each command (started together) exits 2 before it starts anything, naming the process
    that holds the store."""
    procs = [
        subprocess.Popen([WHALE, *c], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for c in commands
    ]
    for command, proc in zip(commands, procs):
        _, stderr = proc.communicate(timeout=60)
        said = " ".join(stderr.decode().split())  # the console wraps long lines
        assert proc.returncode == 2, (command, said[-2000:])
        assert f"whale (pid {holder}) is already running the loop on {home}" in said, said


def test_one_workbench_drives_a_store_and_the_others_name_it(tmp_path, whale_env):
    home, db = tmp_path / "home", tmp_path / "home" / "whale.db"
    path = tmp_path / "two.toml"
    # short answers: what the harness scores does not matter here, only who drives
    text = quick_toml("two", "harness_only", rollouts=8, search={"tasks": 4})
    path.write_text(text + "\n[sampling]\nmax_tokens = 16\n")
    run = ["run", str(path)]

    first = subprocess.Popen(
        [WHALE, *run], env=whale_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_for(db, IN_FLIGHT)
        steer(db, "pause")  # the run waits, driven, however long the refused commands take
        all_refused(first.pid, home, [run, ["serve", "--port", str(free_port())]], whale_env)
        first.send_signal(signal.SIGTERM)  # hand the run over: it stays unfinished, resumable
        assert first.wait(60) == TERMINATED
    finally:
        first.kill()
        first.stderr.close()

    server, url = serve(whale_env)  # resumes the run, still paused: now it drives
    try:
        others = [["serve", "--port", str(free_port())], ["demo", "--port", str(free_port())]]
        all_refused(server.pid, home, [*others, run], whale_env)
        steer(db, "resume")
        wait_for(db, "SELECT count(*) FROM run WHERE status = 'done'")
    finally:
        server.terminate()
        server.wait(30)
        server.stderr.close()
    counts = store_invariants(db)
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM run").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM event WHERE kind = 'run_start'").fetchone()[0] == 1
    assert counts["rollout"] == con.execute("SELECT sum(n_tasks * k) FROM evaluation").fetchone()[0]
