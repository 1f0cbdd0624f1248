"""The FastAPI application: every page as HTML and as JSON under /api (app/web/pages.py), the
writes (app/web/actions.py), static files, behind the web security checks (Host, access token,
CSRF). An error answers a browser with a page, a page's form or button (htmx) with a fragment
it shows in place, and the API with JSON."""

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from app import ROOT
from app.web import actions, annotate, pages, security
from app.web.templating import from_htmx, refusal, render
from app.workbench import Workbench


def answer_error(request: Request, status: int, message: str):
    """The API and scripts get {"detail": message}; a browser page gets a page saying it; a
    form or button of a page (htmx) gets a fragment it shows in place."""
    if request.url.path.startswith(("/api/", "/static/")):
        return JSONResponse({"detail": message}, status_code=status)
    if from_htmx(request):
        return refusal(status, message)
    return render(request, "404.html", {"message": message, "status": status}, status)


def create_app(workbench: Workbench, *, token: str | None, host: str = "127.0.0.1") -> FastAPI:
    """An app for a server listening on `host`: it answers only requests for that host (and the
    loopback names, and WHALE_ALLOWED_HOSTS); every request must carry `token` (None: an open
    server, `whale serve --no-token`; see app/web/security.py)."""
    app = FastAPI(title="Whale workbench", version="0.1.0")
    app.state.workbench = workbench
    app.state.token = token
    # Random per server. Pages read it from app.state, not from a jinja global: the jinja
    # environment is shared by every app in the process.
    app.state.csrf_token = security.new_secret()
    hosts = security.allowed_hosts(host, workbench.settings.allowed_hosts)
    app.add_middleware(
        security.WebSecurity,
        token=token,
        csrf_token=app.state.csrf_token,
        hosts=hosts,
        any_ip=host in security.WILDCARD_HOSTS,
    )

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError):
        # A malformed request is the caller's mistake: say what is wrong, briefly.
        problems = [
            f"{'.'.join(str(p) for p in e['loc'][1:]) or e['loc'][0]}: {e['msg']}"
            for e in exc.errors()
        ]
        return answer_error(request, 422, "; ".join(problems))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return answer_error(request, exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception):
        # A bug or a failure below (the model server did not start...): said, not swallowed,
        # so a form that sent the request shows why nothing happened. Starlette re-raises it
        # after this answer, so the traceback still reaches the server's log.
        return answer_error(request, 500, f"{type(exc).__name__}: {exc}")

    app.include_router(pages.api, prefix="/api")
    app.include_router(actions.api, prefix="/api")
    app.include_router(annotate.api, prefix="/api")
    app.include_router(security.router, prefix="/api")
    app.include_router(actions.forms)
    app.include_router(annotate.forms)
    app.include_router(pages.html)
    app.mount("/static", StaticFiles(directory=ROOT / "static"), name="static")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon():
        # Browsers ask for it whatever a page links (a JSON view, an error page): the same icon.
        return FileResponse(ROOT / "static" / "favicon.svg")

    return app
