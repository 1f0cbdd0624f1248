"""The FastAPI application: JSON API under /api, HTML pages, static files, behind the web
security checks (access token, CSRF)."""

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from app import ROOT
from app.api.control import router as control_router
from app.api.routes import router as api_router
from app.loop.manager import LoopManager
from app.web import security
from app.web.pages import router as web_router
from app.web.run_pages import router as run_pages_router
from app.workbench import Workbench


def create_app(workbench: Workbench, token: str | None = None, host: str = "127.0.0.1") -> FastAPI:
    """An app for a server listening on `host`: it answers only requests for that host (and the
    loopback names, and WHALE_ALLOWED_HOSTS); with a token, every request must carry it (see
    app/web/security.py)."""
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
    app.state.loops = LoopManager(workbench)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError):
        # A malformed request is the caller's mistake: say what is wrong, briefly.
        problems = [
            f"{'.'.join(str(p) for p in e['loc'][1:]) or e['loc'][0]}: {e['msg']}"
            for e in exc.errors()
        ]
        return JSONResponse({"detail": "; ".join(problems)}, status_code=422)

    app.include_router(api_router, prefix="/api")
    app.include_router(control_router, prefix="/api")
    app.include_router(security.router, prefix="/api")
    app.include_router(run_pages_router)
    app.include_router(web_router)
    app.mount("/static", StaticFiles(directory=ROOT / "static"), name="static")
    return app
