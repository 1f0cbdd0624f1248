"""Who may talk to the workbench server: a known Host, the access token, CSRF checks on writes.

Host (DNS rebinding): a page of evil.example whose name the attacker re-points at 127.0.0.1 is,
for the browser, same-origin with this server: it could read /api/csrf and then post with the
token. Its requests say `Host: evil.example`, so every request whose Host is not a name this
server was started for (loopback names, the --host address, WHALE_ALLOWED_HOSTS) is refused,
before anything else. An IP address in Host cannot be re-pointed, so a server bound to every
interface (0.0.0.0, ::) also answers to any address. (Starlette's TrustedHostMiddleware cuts the
Host at its first colon, which breaks IPv6 addresses, hence the few lines here.)

Access token (like Jupyter), on loopback too: any process of the machine reaches 127.0.0.1 -
another user's, or a coding agent or harness that broke out of its own confinement - and the
API starts runs and promotes harnesses. So every request - page, static file, API call - must
carry the token printed at start (`$WHALE_TOKEN`, else a fresh random one): as
`Authorization: Bearer <token>`, as `?token=<token>`, or as the cookie that a first visit with
`?token=` sets (that visit is redirected to the same URL without the token, so it does not
linger in the address bar and the history). `whale serve --no-token` serves a loopback server
openly, as before; off loopback a token is always required.

CSRF: a browser sends the cookie, or on loopback merely reaches the server, for any page that
asks, including another site's. That site can make a browser post a form, but it can neither
read our pages nor add a custom header without a CORS preflight we never answer. So every
state-changing request must carry `X-CSRF-Token` equal to this server's CSRF token, which pages
hold in a meta tag (htmx sends it on every request) and other clients get from GET /api/csrf.
A request from a foreign Origin is refused as well, in case a browser lets a header through.
"""

import hmac
import ipaddress
import secrets
import socket
from html import escape
from urllib.parse import urlsplit

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.web.templating import from_htmx, refusal

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
CSRF_HEADER = "X-CSRF-Token"
WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}  # listening on every interface

router = APIRouter()


@router.get("/csrf")
def csrf(request: Request) -> dict:
    """The value of the X-CSRF-Token header that POST requests must carry."""
    return {"csrf_token": request.app.state.csrf_token}


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def allowed_hosts(host: str, extra: str | None = None) -> frozenset[str]:
    """The Host names a server listening on `host` answers to (lower case, without port);
    `extra`: comma-separated more (WHALE_ALLOWED_HOSTS), e.g. the name of a reverse proxy."""
    names = {"localhost", "127.0.0.1", "::1", host.strip("[]").lower()}
    if host in WILDCARD_HOSTS:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    names |= {name.strip().lower() for name in (extra or "").split(",") if name.strip()}
    return frozenset(names - {""})


def host_name(header: str) -> str:
    """The name in a Host header, without its port: `[::1]:8000` -> `::1`, `a.b:80` -> `a.b`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def access_token(host: str, given: str | None, open_access: bool = False) -> str | None:
    """The token a server listening on `host` requires: the one given, else a fresh one; None
    with `open_access` (--no-token), which only a loopback server may have."""
    if open_access:
        if not is_loopback(host):
            raise ValueError(
                f"--no-token serves without an access token, for a loopback server only; "
                f"{host} is reachable from the network"
            )
        return None
    return given or new_secret()


def _same(given: str | None, secret: str) -> bool:
    # constant time, so that response timing does not reveal how much of a guess was right
    return given is not None and hmac.compare_digest(given.encode(), secret.encode())


def _refusal(request: Request, status: int, title: str, message: str) -> Response:
    if request.url.path.startswith("/api"):  # API clients read JSON
        return JSONResponse({"detail": message}, status)
    if from_htmx(request):  # a page's form or button: shown in place (a stale CSRF token...)
        return refusal(status, message)
    page = (
        f'<!doctype html><meta charset="utf-8"><title>{escape(title)} · Whale</title>'
        f"<h1>{escape(title)}</h1><p>{escape(message)}</p>"
    )
    return HTMLResponse(page, status)


class WebSecurity:
    """ASGI middleware in front of the whole app, static files included."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        csrf_token: str,
        hosts: frozenset[str],
        any_ip: bool = False,
    ):
        self.app, self.token, self.csrf_token = app, token, csrf_token
        self.hosts, self.any_ip = hosts, any_ip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The app serves plain HTTP only (no websockets); lifespan events pass through.
        if scope["type"] == "http":
            request = Request(scope)
            refused = (
                self.check_host(request)
                or (self.token and self.check_token(request))
                or self.check_write(request)
            )
            if refused:
                return await refused(scope, receive, send)
        await self.app(scope, receive, send)

    def check_host(self, request: Request) -> Response | None:
        """None when the Host header names this server, else a 400 (see the module docstring)."""
        header = request.headers.get("host", "")
        name = host_name(header)
        if name in self.hosts or (self.any_ip and _is_ip(name)):
            return None
        return _refusal(
            request,
            400,
            "Unknown host",
            f"Refused: this workbench does not answer to the host {header!r}; open it "
            "by a name it was started for, or add that name to WHALE_ALLOWED_HOSTS.",
        )

    def check_token(self, request: Request) -> Response | None:
        """None when the request carries the access token, else the answer to give instead."""
        path = request.url.path
        # One cookie per port: servers on other ports of the same host keep theirs.
        cookie = f"whale-token-{(request.scope.get('server') or ('', ''))[1]}"
        in_query = request.query_params.get("token")
        if _same(in_query, self.token) and request.method == "GET" and not path.startswith("/api"):
            rest = request.url.remove_query_params("token")
            back = RedirectResponse(rest.path + (f"?{rest.query}" if rest.query else ""), 303)
            back.set_cookie(cookie, self.token, httponly=True, samesite="lax")
            return back
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        bearer = bearer if scheme.lower() == "bearer" else None
        offered = (in_query, request.cookies.get(cookie), bearer)
        if any(_same(given, self.token) for given in offered):
            return None
        refused = _refusal(
            request,
            401,
            "Access token required",
            "This workbench needs its access token: open the URL printed by "
            "whale serve (it ends in ?token=...), or send the header "
            "Authorization: Bearer <token>.",
        )
        refused.headers["WWW-Authenticate"] = "Bearer"
        return refused

    def check_write(self, request: Request) -> Response | None:
        """None unless a state-changing request lacks the CSRF token or comes from elsewhere."""
        if request.method in SAFE_METHODS:
            return None
        method = request.method
        origin, host = request.headers.get("origin"), request.headers.get("host", "")
        if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
            return _refusal(
                request,
                403,
                "Cross-origin request refused",
                f"Refused: a {method} from {origin}; this workbench only accepts "
                "changes from its own pages.",
            )
        if not _same(request.headers.get(CSRF_HEADER), self.csrf_token):
            # a page's own form: its token is a former server's (each start makes a new one)
            fix = (
                "this page is older than the server (restarted?): reload the page and try again"
                if from_htmx(request)
                else "get it from GET /api/csrf"
            )
            return _refusal(
                request,
                403,
                "CSRF token missing or wrong",
                f"Refused: a {method} needs the header {CSRF_HEADER} with this "
                f"server's CSRF token; {fix}.",
            )
        return None
