"""The gateway: the only door out of a sandbox.

It listens on a Unix socket that is bind-mounted into each sandbox. A rollout gets a token
(a Grant); every request must carry it. Model calls are forwarded to the backend under the
grant's checkpoint, tool calls to the domain's tools; each call is checked against the grant's
budgets and recorded as a step of that rollout. A model call's max_tokens is reserved from the
rollout's token budgets when it is sent and settled on its real usage when it ends, so calls in
flight together cannot overshoot them; a rollout has at most `max_open_calls` calls open at once,
and a request body over `max_body_bytes` is refused before it is read.

Servers that can (vLLM, the local server) are asked for the token ids of each call: the prompt
ids and the completion ids, recorded with the step for training on exactly what was sampled
(app/training/examples.py). The harness never sees them: they are taken out of the answer.
"""

import asyncio
import inspect
import json
import logging
import secrets
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.db.schema import Step
from app.db.steps import compact, pack_ids, token_list
from app.db.writer import Writer
from app.faults import Outage
from app.llm.client import BackendError, ChatEndpoint
from app.llm.generation import Generation, refused_fields

log = logging.getLogger(__name__)
# The backends asked for each call's token ids (`return_token_ids`: vLLM >= 0.10.2 and the
# local server); a hosted API would refuse the field.
TOKEN_ID_BACKENDS = frozenset({"local", "vllm"})


@dataclass
class Grant:
    rollout_id: int
    model: str  # the checkpoint's served model name
    tools: dict[str, Callable[..., Any]] = field(default_factory=dict)
    # the sampling defaults, forced fields and budgets of its calls (app/llm/generation.py)
    generation: Generation = field(default_factory=lambda: Generation("endpoint"))
    # Tools that run inside the sandbox (a code interpreter) and report each call afterwards.
    sandbox_tools: frozenset[str] = frozenset()
    max_sandbox_tool_calls: int = 16
    sandbox_tool_calls: int = 0
    calls: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reserved_tokens: int = 0  # the max_tokens of its model calls in flight, not settled yet
    sent: list = field(default_factory=list)  # the previous model call's messages
    sent_ids: list = field(default_factory=list)  # and its prompt + completion token ids
    # Time the rollout spent waiting on the gateway (model and host-side tool calls, from sent
    # to answered, counted once while several are in flight): not the harness's time, so its
    # wall-clock limit does not count it (sandbox/pool.py).
    waited_s: float = 0.0
    in_flight: int = 0
    reading: int = 0  # its requests whose bodies are being read: open calls too
    waiting_since: float = 0.0
    # Model calls the backend failed (unreachable, no answer in time, 429 or 5xx): the
    # rollout's outcome says nothing about its harness (app/rollout/evaluate.py retries it).
    infra_errors: list[str] = field(default_factory=list)
    # Model calls sent and not answered yet: call number -> (the request, when it was sent). A
    # rollout can end with one in flight (its harness gave up on it, its sandbox died); the
    # trace still shows that call, unanswered, with how long it had run.
    open_calls: dict[int, tuple[dict, float]] = field(default_factory=dict)

    def waited(self) -> float:
        """Seconds waited on the gateway so far, the call in flight included."""
        open_s = time.monotonic() - self.waiting_since if self.in_flight else 0.0
        return self.waited_s + open_s

    @contextmanager
    def waiting(self):
        if self.in_flight == 0:
            self.waiting_since = time.monotonic()
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.waited_s += time.monotonic() - self.waiting_since


def is_infrastructure(exc: Exception) -> bool:
    """A backend failure that is not the call's fault: no connection, no answer, rate limit or
    a server error. A 4xx (a prompt over the context, a bad field) is the harness's own."""
    if not isinstance(exc, BackendError):
        return True
    return exc.status is None or exc.status == 429 or exc.status >= 500


def _refuse(status: int, reason: str, detail: str, close: bool = False) -> JSONResponse:
    headers = {"Connection": "close"} if close else None
    return JSONResponse({"detail": detail, "reason": reason}, status_code=status, headers=headers)


MAX_BODY_BYTES = 16 << 20
MAX_OPEN_CALLS = 8


async def _json_body(request: Request, limit: int) -> dict | JSONResponse:
    """The request's JSON object, read only while it stays within `limit` bytes: a larger one is
    refused by its Content-Length, or (chunked) as soon as what arrived passes the limit. The
    refusal closes the connection: kept alive, uvicorn would read the rest of the body (to drop
    it) before the connection could serve another call."""
    too_large = _refuse(413, "too_large", f"the request body is over {limit} bytes", close=True)
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        return too_large
    received, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return too_large
        received.append(chunk)
    try:
        body = json.loads(b"".join(received))
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _refuse(400, "bad_request", "the request body must be a JSON object")
    return body


def _take_token_ids(response: dict) -> tuple[list[int], list[int]] | None:
    """The (prompt, completion) token ids of the answer's first choice, taken out of the answer
    (every choice's): the harness has no use for them, and they would double what it reads.
    None when the server gave none, or something that is not a list of ids."""
    if not isinstance(response, dict):
        return None
    prompt = token_list(response.pop("prompt_token_ids", None))
    choices = response.get("choices") or []
    completions = [c.pop("token_ids", None) if isinstance(c, dict) else None for c in choices]
    completion = token_list(completions[0]) if completions else None
    return None if prompt is None or completion is None else (prompt, completion)


def _allowance(grant: Grant, body: dict) -> int | JSONResponse:
    """The completion tokens a model call may still use: what the budgets leave once the calls
    in flight get all they may still use; or the refusal (a field the backend refuses, a call or
    token budget used up)."""
    gen = grant.generation
    refused = refused_fields(body, gen.backend)
    if refused:
        return _refuse(400, "bad_request", refused)
    if grant.calls >= gen.max_calls:
        return _refuse(429, "budget", f"model-call budget of {gen.max_calls} calls used up")
    spent = grant.prompt_tokens + grant.completion_tokens + grant.reserved_tokens
    if spent >= gen.max_tokens:
        return _used_up(grant, f"token budget of {gen.max_tokens} tokens used up")
    completion_left = gen.max_tokens - spent
    if gen.max_completion_tokens is not None:
        completion_spent = grant.completion_tokens + grant.reserved_tokens
        if completion_spent >= gen.max_completion_tokens:
            detail = f"completion budget of {gen.max_completion_tokens} tokens used up"
            return _used_up(grant, detail)
        completion_left = min(completion_left, gen.max_completion_tokens - completion_spent)
    return completion_left


def _used_up(grant: Grant, detail: str) -> JSONResponse:
    """A token budget's refusal, naming what the calls in flight reserved of it."""
    if grant.reserved_tokens:
        detail += f" ({grant.reserved_tokens} reserved by calls in flight)"
    return _refuse(429, "budget", detail)


def _outgoing(gen: Generation, body: dict, completion_left: int) -> dict:
    """The body sent to the backend: the run's decoding applied within `completion_left`
    tokens, a seed, and the ask for token ids where the backend gives them."""
    body = gen.apply(body, completion_left)
    # Some servers sample identically for identical unseeded requests (transformers serve
    # does), which would make k samples one sample k times. A fresh seed per call keeps
    # draws independent, and the recorded seed makes each call reproducible.
    if body.get("seed") is None:
        body["seed"] = secrets.randbelow(2**31)
    if gen.backend in TOKEN_ID_BACKENDS:
        body["return_token_ids"] = True
    return body


STOP_GRACE_S = 2.0


class _Embedded(uvicorn.Server):
    """A uvicorn server inside a command: SIGTERM and Ctrl-C are the command's to handle (they
    stop its loops first); uvicorn's own handlers would stop the gateway under running rollouts."""

    @contextmanager
    def capture_signals(self):
        yield


class Gateway:
    def __init__(
        self,
        writer: Writer,
        backend: ChatEndpoint,
        outage: Outage | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_open_calls: int = MAX_OPEN_CALLS,
    ):
        """`outage` is told of model calls that the backend fails and of its next answer;
        `max_open_calls`: model and tool calls one rollout may have open at once."""
        if max_body_bytes < 1 or max_open_calls < 1:
            raise ValueError("the gateway's body and open-call limits must be at least 1")
        self.max_body_bytes = max_body_bytes
        self.max_open_calls = max_open_calls
        self.writer = writer
        self.backend = backend
        self.outage = outage
        self._in_flight: set[asyncio.Task] = set()  # the request tasks of model calls
        self.grants: dict[str, Grant] = {}
        self.app = self._build_app()
        self._server: uvicorn.Server | None = None

    def grant(self, grant: Grant) -> str:
        token = secrets.token_urlsafe(24)
        self.grants[token] = grant
        return token

    def revoke(self, token: str) -> Grant:
        """End the rollout's access; a model call still in flight is recorded unanswered (an
        answer that comes later is not recorded: the rollout is over)."""
        grant = self.grants.pop(token)
        for call in sorted(grant.open_calls):
            self._unanswered(grant, call, "no response: the rollout ended while it was in flight")
        return grant

    def _unanswered(self, grant: Grant, call: int, why: str) -> None:
        """Record an open call as sent and never answered, once (whoever closes it first)."""
        opened = grant.open_calls.pop(call, None)
        if opened is None:
            return
        request, sent = opened
        ran_s = time.perf_counter() - sent
        error = f"{why} ({ran_s:.1f} s after it was sent)"
        self._record(grant, kind="model", request=request, error=error, latency_ms=ran_s * 1000)

    def _record(self, grant: Grant, ids: tuple[list, list] | None = None, **step) -> None:
        if step["kind"] == "model":  # stored as what it added to the call before (app/db/steps.py)
            messages = step["request"]["messages"]
            step["request"] = compact(grant.sent, step["request"])
            grant.sent = messages
            if ids is not None:
                step["token_ids"] = pack_ids(grant.sent_ids, *ids)
                grant.sent_ids = ids[0] + ids[1]
        grant.steps += 1
        self.writer.append(Step, rollout_id=grant.rollout_id, idx=grant.steps - 1, **step)

    def _authorize(self, request: Request) -> Grant | None:
        auth = request.headers.get("authorization", "")
        return self.grants.get(auth.removeprefix("Bearer ").strip())

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="whale gateway", docs_url=None, redoc_url=None)
        app.add_api_route("/v1/chat/completions", self._chat, methods=["POST"])
        app.add_api_route("/tools/{name}", self._tool, methods=["POST"])
        app.add_api_route("/tools/{name}/record", self._sandbox_tool, methods=["POST"])
        return app

    async def _chat(self, request: Request):
        """A model call: checked against the grant's budgets, sent under its checkpoint with the
        run's decoding, and recorded as a step of its rollout."""
        opened = await self._open(request)
        if isinstance(opened, JSONResponse):
            return opened
        grant, body = opened
        messages = body.pop("messages", None)
        if not isinstance(messages, list):
            return _refuse(400, "bad_request", "messages must be a list")
        body.pop("model", None)  # the grant names the model: the rollout's checkpoint
        completion_left = _allowance(grant, body)
        if isinstance(completion_left, JSONResponse):
            return completion_left
        asked = grant.generation.overridden(body)  # the harness's own decoding, fixed by the run
        body = _outgoing(grant.generation, body, completion_left)
        grant.calls += 1
        call = grant.calls
        # exactly what reaches the server (the client adds only the model name)
        request_record = {"model": grant.model, "messages": messages, **body}
        if asked:  # not sent: kept so the trace shows what the harness wanted
            request_record["harness_asked"] = asked
        grant.open_calls[call] = (request_record, time.perf_counter())
        response = await self._send(grant, call, messages, body)
        if isinstance(response, JSONResponse):
            return response
        ids = _take_token_ids(response)  # before anything returns it to the harness
        opened_call = grant.open_calls.pop(call, None)
        if opened_call is not None:  # else recorded when its rollout ended
            self._record_answer(grant, *opened_call, response, ids)
        return response

    async def _send(self, grant: Grant, call: int, messages: list, body: dict):
        """Send the open model `call` to the backend, its max_tokens reserved from the budgets
        while it is in flight: the backend's answer, or the refusal that reports its failure
        (recorded as the call's step unless its rollout ended first)."""
        self._in_flight.add(asyncio.current_task())
        reserved = max(0, body["max_tokens"])  # settled below, however the call ends
        grant.reserved_tokens += reserved
        try:
            with grant.waiting():
                response = await self.backend.chat(grant.model, messages, **body)
        except asyncio.CancelledError:
            # Only stop() cancels a call (the workbench stops): recorded unanswered, and
            # answered so, which ends the request cleanly where raising would have uvicorn
            # log a traceback per call in flight.
            self._unanswered(grant, call, "no response: the call was cancelled in flight")
            return _refuse(503, "backend", "the workbench is stopping")
        except Exception as exc:  # noqa: BLE001 - a backend failure fails this call only
            opened = grant.open_calls.pop(call, None)
            if opened is None:  # recorded when its rollout ended
                return _refuse(502, "backend", f"model backend error: {exc}")
            request_record, start = opened
            latency = (time.perf_counter() - start) * 1000
            if is_infrastructure(exc):
                grant.infra_errors.append(str(exc))
                if self.outage:
                    self.outage.failed(f"model backend error: {exc}")
            self._record(
                grant, kind="model", request=request_record, error=str(exc), latency_ms=latency
            )
            return _refuse(502, "backend", f"model backend error: {exc}")
        finally:
            self._in_flight.discard(asyncio.current_task())
            grant.reserved_tokens -= reserved
        if self.outage:
            self.outage.back()
        return response

    def _record_answer(
        self,
        grant: Grant,
        request_record: dict,
        start: float,
        response: dict,
        ids: tuple[list, list] | None,
    ) -> None:
        """An answered model call: its usage counted against the grant, and its step recorded."""
        latency = (time.perf_counter() - start) * 1000
        usage = response.get("usage") or {}
        prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        grant.prompt_tokens += prompt
        grant.completion_tokens += completion
        choice = response["choices"][0]
        self._record(
            grant,
            kind="model",
            request=request_record,
            response={
                "message": choice.get("message"),
                "finish_reason": choice.get("finish_reason"),
            },
            prompt_tokens=prompt,
            completion_tokens=completion,
            latency_ms=latency,
            ids=ids,
        )

    async def _tool(self, name: str, request: Request):
        """A call to one of the domain's host-side tools: run, and recorded."""
        opened = await self._open(request)
        if isinstance(opened, JSONResponse):
            return opened
        grant, body = opened
        args, kwargs = body.get("args", []), body.get("kwargs", {})
        fn = grant.tools.get(name)
        request_record = {"args": args, "kwargs": kwargs}
        if fn is None:
            known = ", ".join(sorted(grant.tools)) or "none"
            detail = f"unknown tool {name!r} (this domain's tools: {known})"
            self._record(grant, kind="tool", tool=name, request=request_record, error=detail)
            return _refuse(404, "unknown_tool", detail)
        start = time.perf_counter()
        try:
            with grant.waiting():
                if inspect.iscoroutinefunction(fn):
                    result = await fn(*args, **kwargs)
                else:  # a blocking tool (e.g. a retriever) must not stall other rollouts
                    result = await asyncio.to_thread(fn, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported to the harness as a failed call
            detail = f"tool {name} failed: {type(exc).__name__}: {exc}"
            self._record(
                grant,
                kind="tool",
                tool=name,
                request=request_record,
                error=detail,
                latency_ms=(time.perf_counter() - start) * 1000,
            )
            return _refuse(400, "tool_error", detail)
        self._record(
            grant,
            kind="tool",
            tool=name,
            request=request_record,
            response={"result": result},
            latency_ms=(time.perf_counter() - start) * 1000,
        )
        return {"result": result}

    async def _sandbox_tool(self, name: str, request: Request):
        """A call the runner made to a sandbox-side tool: counted and recorded, not run."""
        opened = await self._open(request)
        if isinstance(opened, JSONResponse):
            return opened
        grant, body = opened
        request_record = {"args": body.get("args", []), "kwargs": body.get("kwargs", {})}
        if name not in grant.sandbox_tools:
            known = ", ".join(sorted(grant.sandbox_tools)) or "none"
            detail = f"unknown sandbox tool {name!r} (this domain's: {known})"
            self._record(grant, kind="tool", tool=name, request=request_record, error=detail)
            return _refuse(404, "unknown_tool", detail)
        if grant.sandbox_tool_calls >= grant.max_sandbox_tool_calls:
            detail = f"tool-call budget of {grant.max_sandbox_tool_calls} {name} calls used up"
            self._record(grant, kind="tool", tool=name, request=request_record, error=detail)
            return _refuse(429, "budget", detail)
        grant.sandbox_tool_calls += 1
        latency = body.get("latency_ms")
        self._record(
            grant,
            kind="tool",
            tool=name,
            request=request_record,
            response={"result": body.get("result")},
            latency_ms=float(latency) if isinstance(latency, (int, float)) else 0.0,
        )
        return {"recorded": True}

    async def _open(self, request: Request) -> tuple[Grant, dict] | JSONResponse:
        """The grant of the call's rollout token and the call's JSON body, or the refusal."""
        grant = self._authorize(request)
        if grant is None:
            return _refuse(401, "bad_token", "unknown or expired rollout token")
        open_calls = grant.in_flight + grant.reading
        if open_calls >= self.max_open_calls:
            detail = (
                f"this rollout already has {open_calls} calls open "
                f"(at most {self.max_open_calls} at once)"
            )
            return _refuse(429, "open_calls", detail)
        # Counted while its body is read; the call's own count (Grant.waiting) starts with no
        # await in between.
        grant.reading += 1
        try:
            body = await _json_body(request, self.max_body_bytes)
        finally:
            grant.reading -= 1
        if isinstance(body, JSONResponse):
            return body
        return grant, body

    async def start(self, socket_path: Path) -> None:
        """Serve on `socket_path` in the running event loop; returns once it accepts calls."""
        socket_path.unlink(missing_ok=True)
        config = uvicorn.Config(
            self.app,
            uds=str(socket_path),
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=STOP_GRACE_S,  # for what stop() did not cancel
        )
        self._server = _Embedded(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the start-up error
            await asyncio.sleep(0.01)
        # Every sandbox user (uid 65534, docker's per-rollout uids) must be able to connect;
        # tokens guard the calls.
        socket_path.chmod(0o666)

    async def stop(self) -> None:
        """Model calls in flight are cancelled (a busy model would take minutes to answer
        them all), then the server stops."""
        for call in list(self._in_flight):
            call.cancel()
        if self._server is not None:
            self._server.should_exit = True
            await self._task
