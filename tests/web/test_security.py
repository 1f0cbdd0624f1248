"""Web security: off loopback every page, file and API call needs the access token; every
state-changing request needs the CSRF header and must not come from another origin."""
import os
import re
import subprocess
import time

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import select

from app.db.schema import Event, Run
from app.llm.local import free_port
from app.server import create_app
from app.web.security import access_token
from tests.conftest import WHALE

TOKEN = "t0ken-for-the-tests"


@pytest.fixture
def guarded(workbench) -> TestClient:
    """A server that requires the access token, as `whale serve --host 0.0.0.0` starts it."""
    return TestClient(create_app(workbench, token=TOKEN))


def test_without_the_token_nothing_is_served(guarded):
    page = guarded.get("/runs")
    assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
    assert "open the URL printed by whale serve" in page.text
    api = guarded.get("/api/runs")
    assert api.status_code == 401 and "access token" in api.json()["detail"]
    assert guarded.get("/static/style.css").status_code == 401
    assert guarded.get("/api/csrf").status_code == 401  # nor is the CSRF token handed out


def test_a_wrong_token_is_refused_wherever_it_is_given(guarded):
    wrong = TOKEN + "x"
    assert guarded.get("/runs", headers={"Authorization": f"Bearer {wrong}"}).status_code == 401
    assert guarded.get(f"/runs?token={wrong}", follow_redirects=False).status_code == 401
    assert guarded.get("/api/runs", headers={"Cookie": f"whale-token-80={wrong}"}).status_code == 401
    assert guarded.get("/api/runs", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401


def test_the_bearer_token_opens_pages_files_and_api(guarded):
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert guarded.get("/runs", headers=bearer).status_code == 200
    assert guarded.get("/static/style.css", headers=bearer).status_code == 200
    assert guarded.get("/api/runs", headers=bearer).json() == []
    assert guarded.get(f"/api/runs?token={TOKEN}").json() == []  # in the query, for scripts


def test_the_printed_url_sets_a_cookie_and_drops_the_token_from_the_address(guarded):
    first = guarded.get(f"/runs?token={TOKEN}&x=1", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/runs?x=1"
    assert "httponly" in first.headers["set-cookie"].lower()
    # the cookie now opens everything
    assert guarded.get("/runs").status_code == 200
    assert guarded.get("/static/style.css").status_code == 200
    assert guarded.get("/api/runs").status_code == 200


@pytest.fixture
def running(store) -> Run:
    return store.write(Run(name="steered", kind="experiment", domain="arith", status="running"))


def desired_and_log(workbench, run_id: int) -> tuple[str | None, list[str]]:
    with workbench.session() as s:
        return s.get(Run, run_id).desired, list(s.exec(select(Event.kind).where(Event.run_id == run_id)))


def test_a_post_without_the_csrf_header_changes_nothing(client, workbench, running):
    missing = client.post(f"/api/runs/{running.id}/pause", json={"reason": "x"})
    assert missing.status_code == 403 and "X-CSRF-Token" in missing.json()["detail"]
    wrong = client.post(f"/api/runs/{running.id}/pause", json={"reason": "x"},
                        headers={"X-CSRF-Token": "guessed"})  # fmt: skip
    assert wrong.status_code == 403
    assert desired_and_log(workbench, running.id) == (None, [])


def test_a_post_with_the_csrf_header_is_applied(client, workbench, running):
    csrf = {"X-CSRF-Token": client.get("/api/csrf").json()["csrf_token"]}
    paused = client.post(f"/api/runs/{running.id}/pause", json={"reason": "x"}, headers=csrf)
    assert paused.status_code == 200, paused.text
    assert desired_and_log(workbench, running.id) == ("paused", ["control"])
    unknown = client.post("/api/runs/9999/pause", json={}, headers=csrf)
    assert unknown.status_code == 404  # the header lets it reach the handler, which answers


def test_pages_carry_the_csrf_token_for_htmx(client):
    csrf = client.get("/api/csrf").json()["csrf_token"]
    page = client.get("/runs").text
    assert f'<meta name="csrf-token" content="{csrf}">' in page
    hx_headers = re.search(r"<body hx-headers='([^']*)'", page).group(1)
    assert csrf in hx_headers and "X-CSRF-Token" in hx_headers


def test_a_post_from_another_origin_is_refused(client, workbench, running):
    csrf = {"X-CSRF-Token": client.get("/api/csrf").json()["csrf_token"]}
    foreign = client.post(f"/api/runs/{running.id}/stop", json={},
                          headers={**csrf, "Origin": "http://evil.example"})  # fmt: skip
    assert foreign.status_code == 403 and "http://evil.example" in foreign.json()["detail"]
    assert desired_and_log(workbench, running.id) == (None, [])
    own = client.post(f"/api/runs/{running.id}/stop", json={},
                      headers={**csrf, "Origin": "http://testserver"})  # fmt: skip
    assert own.status_code == 200


def test_only_loopback_goes_without_a_token():
    assert access_token("127.0.0.1", None) is None and access_token("localhost", None) is None
    assert access_token("::1", None) is None
    first, second = access_token("0.0.0.0", None), access_token("192.168.1.7", None)
    assert first and second and first != second and len(first) >= 32
    assert access_token("127.0.0.1", "mine") == access_token("0.0.0.0", "mine") == "mine"


def test_whale_serve_on_all_interfaces_prints_and_requires_a_token(tmp_path, model_cache):
    env = {**os.environ, "WHALE_HOME": str(tmp_path / "home"), "WHALE_MODEL_CACHE": str(model_cache)}
    env.pop("WHALE_TOKEN", None)
    port = free_port()
    proc = subprocess.Popen([WHALE, "serve", "--host", "0.0.0.0", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = proc.stderr.readline()  # printed before the server starts
        printed = re.search(rf"http://0\.0\.0\.0:{port}/\?token=([\w-]+)", line)
        assert printed, line
        token, url = printed.group(1), f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                refused = httpx.get(url + "/api/runs", timeout=5)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "whale serve died"
                time.sleep(0.3)
        assert refused.status_code == 401
        assert httpx.get(url + "/runs", timeout=30).status_code == 401
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.get(url + "/api/runs", headers=bearer, timeout=30).status_code == 200
        with httpx.Client(base_url=url, follow_redirects=True, timeout=30) as browser:
            page = browser.get(f"/runs?token={token}")  # the printed URL, as a browser opens it
            assert page.status_code == 200 and "Whale workbench" in page.text
            assert browser.get("/api/runs").status_code == 200  # by the cookie alone
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()
