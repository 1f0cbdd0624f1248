"""The FastAPI application: JSON API under /api, HTML pages, static files."""
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from app import ROOT
from app.api.control import router as control_router
from app.api.routes import router as api_router
from app.loop.manager import LoopManager
from app.web.pages import router as web_router
from app.workbench import Workbench


def create_app(workbench: Workbench) -> FastAPI:
    app = FastAPI(title="Whale workbench", version="0.1.0")
    app.state.workbench = workbench
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
    app.include_router(web_router)
    app.mount("/static", StaticFiles(directory=ROOT / "static"), name="static")
    return app
