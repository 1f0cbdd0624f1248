"""Runs one harness on one task inside the sandbox. Standard library only.

Invoked as `python -I -S runner.py HARNESS_PATH` with the task as JSON on stdin and
WHALE_GATEWAY (a Unix socket path) and WHALE_TOKEN in the environment. The harness's
`llm.chat` and `tools.<name>` go to the gateway over that socket; nothing else is reachable.
The result is one JSON line on the original stdout, after the RESULT_MARKER.
"""
import http.client
import io
import json
import os
import socket
import sys
import traceback

RESULT_MARKER = "\x00WHALE_RESULT\x00"
TAIL_CHARS = 4000


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
                "Authorization": "Bearer " + os.environ["WHALE_TOKEN"],
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

        def call(*args, **kwargs):
            return _post(f"/tools/{name}", {"args": list(args), "kwargs": kwargs})["result"]

        return call


class _Tail(io.TextIOBase):
    """Keeps only the last TAIL_CHARS written: a harness that prints gigabytes costs no memory."""

    def __init__(self):
        self.buf = ""

    def writable(self):
        return True

    def write(self, s):
        self.buf = (self.buf + str(s))[-TAIL_CHARS:]
        return len(s)


def _traceback_tail(exc, harness_path):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == harness_path]
    where = f" (harness line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}", "".join(
        traceback.format_exception(exc)
    )[-TAIL_CHARS:]


def main():
    harness_path = sys.argv[1]
    real_stdout = os.fdopen(os.dup(1), "w")
    task = json.loads(sys.stdin.read())
    out, err = _Tail(), _Tail()
    result = {"answer": None, "error": None, "reason": None}
    sys.stdout, sys.stderr = out, err
    try:
        source = open(harness_path).read()
        try:
            code = compile(source, harness_path, "exec")
        except SyntaxError as exc:
            result["reason"] = "syntax_error"
            result["error"] = f"SyntaxError: {exc.msg} (harness line {exc.lineno})"
            raise
        namespace = {"__name__": "harness", "__file__": harness_path}
        exec(code, namespace)
        if not callable(namespace.get("run")):
            result["reason"] = "no_run"
            result["error"] = "the harness defines no run(task, llm, tools) function"
        else:
            answer = namespace["run"](task, LLM(), Tools())
            result["answer"] = None if answer is None else str(answer)
    except SyntaxError:
        pass
    except GatewayError as exc:
        result["reason"] = exc.reason
        result["error"], tb = _traceback_tail(exc, harness_path)
        err.write(tb)
    except MemoryError as exc:
        result["reason"] = "memory_limit"
        result["error"], tb = _traceback_tail(exc, harness_path)
        result["error"] += ": the harness ran out of its memory limit"
    except BaseException as exc:  # noqa: BLE001 - anything the harness raises is its failure
        result["reason"] = "exception"
        result["error"], tb = _traceback_tail(exc, harness_path)
        err.write(tb)
    result["stdout_tail"], result["stderr_tail"] = out.buf, err.buf
    real_stdout.write(RESULT_MARKER + json.dumps(result) + "\n")
    real_stdout.flush()


if __name__ == "__main__":
    main()
