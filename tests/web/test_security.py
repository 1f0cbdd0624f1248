"""Web security: every page, file and API call needs the access token, on loopback too (unless
`whale serve --no-token`); every state-changing request needs the CSRF header and must not come
from another origin."""

import os
import re
import socket
import subprocess
import time
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import select

from app.db.schema import Event, Run
from app.llm.local import free_port
from app.server import create_app
from app.web.security import access_token, host_name
from tests.conftest import AUTH, WHALE, whale_serve

TOKEN = "t0ken-for-the-tests"


@pytest.fixture
def guarded(workbench) -> TestClient:
    """A server that requires the access token, as `whale serve` starts it."""
    return TestClient(create_app(workbench, token=TOKEN), base_url="http://localhost")


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
    assert (
        guarded.get("/api/runs", headers={"Cookie": f"whale-token-80={wrong}"}).status_code == 401
    )
    assert guarded.get("/api/runs", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401


def test_the_bearer_token_opens_pages_files_and_api(guarded):
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert guarded.get("/runs", headers=bearer).status_code == 200
    assert guarded.get("/static/style.css", headers=bearer).status_code == 200
    assert guarded.get("/api/runs", headers=bearer).json()["runs"] == []
    assert guarded.get(f"/api/runs?token={TOKEN}").json()["runs"] == []  # in the query, for scripts


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
        return s.get(Run, run_id).desired, list(
            s.exec(select(Event.kind).where(Event.run_id == run_id))
        )


def test_a_post_without_the_csrf_header_changes_nothing(client, workbench, running):
    missing = client.post(f"/api/runs/{running.id}/pause", json={"reason": "x"})
    assert missing.status_code == 403 and "X-CSRF-Token" in missing.json()["detail"]
    wrong = client.post(
        f"/api/runs/{running.id}/pause", json={"reason": "x"}, headers={"X-CSRF-Token": "guessed"}
    )
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
    foreign = client.post(
        f"/api/runs/{running.id}/stop", json={}, headers={**csrf, "Origin": "http://evil.example"}
    )
    assert foreign.status_code == 403 and "http://evil.example" in foreign.json()["detail"]
    assert desired_and_log(workbench, running.id) == (None, [])
    own = client.post(
        f"/api/runs/{running.id}/stop", json={}, headers={**csrf, "Origin": "http://localhost"}
    )
    assert own.status_code == 200


def test_every_server_needs_a_token_unless_told_otherwise():
    first, second = access_token("127.0.0.1", None), access_token("0.0.0.0", None)
    assert first and second and first != second and len(first) >= 32
    assert access_token("127.0.0.1", "mine") == access_token("0.0.0.0", "mine") == "mine"
    assert access_token("127.0.0.1", None, open_access=True) is None
    assert access_token("::1", "mine", open_access=True) is None
    with pytest.raises(ValueError, match="for a loopback server only"):
        access_token("0.0.0.0", None, open_access=True)


@contextmanager
def served(tmp_path, *args: str):
    """`whale serve ARGS` on a fresh store without WHALE_TOKEN: (its base URL, the first line it
    printed), once it answers."""
    env = {**os.environ, "WHALE_HOME": str(tmp_path / "home")}
    env.pop("WHALE_TOKEN", None)
    port = free_port()
    proc = subprocess.Popen(
        [WHALE, "serve", "--port", str(port), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()  # printed before the server starts
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(url + "/favicon.ico", timeout=5)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "whale serve died"
                time.sleep(0.3)
        yield url, line
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()


def test_whale_serve_on_loopback_prints_and_requires_a_token(tmp_path):
    with served(tmp_path) as (url, line):
        printed = re.search(
            rf"(http://127\.0\.0\.1:{url.rsplit(':', 1)[1]}/)\?token=([\w-]+)", line
        )
        assert printed, line
        token = printed.group(2)
        # another process of the machine, without the token: a script gets JSON, a browser a page
        api = httpx.get(url + "/api/runs", timeout=30)
        assert api.status_code == 401 and "access token" in api.json()["detail"]
        page = httpx.get(url + "/runs", timeout=30)
        assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
        assert "open the URL printed by whale serve" in page.text
        assert httpx.get(url + "/api/csrf", timeout=30).status_code == 401
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.get(url + "/api/runs", headers=bearer, timeout=30).status_code == 200
        with httpx.Client(follow_redirects=True, timeout=30) as browser:
            page = browser.get(printed.group(0))  # the printed URL, as a browser opens it
            assert page.status_code == 200 and "Whale workbench" in page.text
            assert str(page.url) == printed.group(1)  # the token left the address bar
            assert browser.get(url + "/api/runs").status_code == 200  # by the cookie alone


def test_whale_serve_no_token_serves_loopback_openly_and_nothing_else(tmp_path):
    with served(tmp_path, "--no-token") as (url, line):
        assert "?token=" not in line
        assert httpx.get(url + "/api/runs", timeout=30).json()["runs"] == []
        assert httpx.get(url + "/runs", timeout=30).status_code == 200
    refused = subprocess.run(
        [WHALE, "serve", "--host", "0.0.0.0", "--no-token"],
        env={**os.environ, "WHALE_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "for a loopback server only" in refused.stderr


def raw_get(port: int, path: str, host: str) -> tuple[int, str]:
    """One HTTP request written by hand, as a DNS-rebound page's browser sends it."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        auth = AUTH["Authorization"]
        conn.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def test_dns_rebinding_gets_nothing_from_a_running_server(tmp_path, model_cache):
    """A page of evil.example re-pointed at 127.0.0.1 reaches the port, but its requests say
    `Host: evil.example`: refused everywhere, the CSRF token included, before anything else."""
    env = {
        **os.environ,
        "WHALE_HOME": str(tmp_path / "home"),
        "WHALE_MODEL_CACHE": str(model_cache),
        "WHALE_ALLOWED_HOSTS": "workbench.lab, proxy.example",
    }
    with whale_serve(env) as url:
        port = int(url.rsplit(":", 1)[1])
        for path in ("/api/csrf", "/api/runs", "/runs", "/static/style.css"):
            status, body = raw_get(port, path, f"evil.example:{port}")
            assert (
                status == 400 and "does not answer to the host" in body and "evil.example:" in body
            ), path
            assert "csrf_token" not in body
        for host in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            f"[::1]:{port}",
            "localhost",
            f"workbench.lab:{port}",
            "PROXY.example",
        ):
            status, body = raw_get(port, "/api/csrf", host)
            assert status == 200 and "csrf_token" in body, host
        assert raw_get(port, "/api/csrf", f"127.0.0.1.evil.example:{port}")[0] == 400
        # a write with a token read legitimately is refused all the same under a foreign Host
        token = httpx.get(url + "/api/csrf", headers=AUTH).json()["csrf_token"]
        posted = httpx.post(
            url + "/api/runs",
            json={"experiment": 'name = "x"'},
            headers={
                **AUTH,
                "Host": f"evil.example:{port}",
                "X-CSRF-Token": token,
                "Origin": f"http://evil.example:{port}",
            },
        )
        assert posted.status_code == 400
        assert httpx.get(url + "/api/runs", headers=AUTH).json()["runs"] == []


def test_the_host_check_runs_before_the_token_check(workbench):
    guarded = TestClient(create_app(workbench, token=TOKEN), base_url="http://evil.example")
    answer = guarded.get(f"/api/runs?token={TOKEN}")
    assert answer.status_code == 400 and "evil.example" in answer.json()["detail"]


def test_a_server_on_every_interface_answers_to_addresses_but_not_to_names(workbench):
    everywhere = create_app(workbench, token=TOKEN, host="0.0.0.0")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for base in ("http://192.0.2.7:8000", "http://[2001:db8::1]:8000", "http://localhost"):
        assert (
            TestClient(everywhere, base_url=base).get("/api/runs", headers=bearer).status_code
            == 200
        )
    assert (
        TestClient(everywhere, base_url="http://evil.example")
        .get("/api/runs", headers=bearer)
        .status_code
        == 400
    )


@pytest.mark.parametrize(
    "header, name",
    [
        ("127.0.0.1:8000", "127.0.0.1"),
        ("[::1]:8000", "::1"),
        ("[::1]", "::1"),
        ("LocalHost", "localhost"),
        ("a.example:80", "a.example"),
        ("", ""),
    ],
)
def test_host_names_are_read_without_their_port(header, name):
    assert host_name(header) == name
