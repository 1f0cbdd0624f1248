"""The supervision every launched model server shares (app/llm/supervisor.py), on a stand-in
server: a dead server is started again and each crash told; rollouts wait while it is down; one
that keeps dying is given up on, and nothing waits for it any more."""

import asyncio
import os
import signal
import sys
import time

from app.llm.supervisor import SupervisedServer

STAND_IN = """
import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


class StandIn(SupervisedServer):
    NAME = "the stand-in"
    MAX_CRASHES = 1

    def command(self) -> list[str]:
        return [sys.executable, "-c", STAND_IN, str(self.port)]


def wait_until(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_dead_server_is_restarted_then_given_up_on(tmp_path):
    told, said = [], []
    server = StandIn(tmp_path / "server.log", say=said.append)
    server.on_event = lambda kind, detail: told.append((kind, detail))
    server.start(timeout=30)
    try:
        first = server.proc.pid
        os.killpg(first, signal.SIGKILL)

        async def wait_for_it() -> float:
            started = time.monotonic()
            await asyncio.sleep(0.1)  # the watcher has not looked yet: it is down all the same
            assert not server.is_up()
            await server.until_up()
            return time.monotonic() - started

        assert asyncio.run(wait_for_it()) > 0.1 and server.is_up()
        assert server.restarts == 1 and server.proc.pid != first
        assert [kind for kind, _ in told] == ["model_server_exited", "model_server_restarted"]
        assert told[0][1] == {
            "why": f"the stand-in was killed by SIGKILL; restarting it (log: {server.log_path})",
            "pid": first,
        }

        os.killpg(server.proc.pid, signal.SIGKILL)  # a second crash in the window: past the limit
        wait_until(lambda: server.gave_up is not None)
        assert "2 crashes in 600s; not restarting it again" in server.gave_up
        assert told[-1] == ("model_server_gave_up", {"why": server.gave_up})
        assert said[-1] == server.gave_up
        started = time.monotonic()
        asyncio.run(server.until_up())  # nothing to wait for: the rollouts' tries fail as infra
        assert time.monotonic() - started < 1
    finally:
        server.stop()
