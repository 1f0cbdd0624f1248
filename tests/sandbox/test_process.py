"""The process sandbox, on harness files a user (or a hostile proposer) might write."""
import asyncio
import os
import shutil
import socket
import textwrap

import pytest

from sandbox.process import Limits, ProcessSandbox

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@pytest.fixture
def run_harness(tmp_path):
    """run_harness(code, **limits) -> SandboxResult, with no gateway behind the socket."""
    (tmp_path / "gw").mkdir()

    def run(code: str, task=None, bwrap: bool = True, **limits):
        harness = tmp_path / "harness.py"
        harness.write_text(textwrap.dedent(code))
        box = ProcessSandbox(Limits(**{"wall_s": 20, **limits}))
        box.bwrap = box.bwrap and bwrap
        sock = tmp_path / "gw" / "gateway.sock"
        return asyncio.run(box.run(harness, task or {"question": "q"}, sock, "token"))

    return run


@pytest.mark.parametrize("bwrap", [True, False], ids=["bwrap", "rlimits-only"])
def test_a_plain_harness_returns_its_answer_and_prints(run_harness, bwrap):
    result = run_harness(
        """
        def run(task, llm, tools):
            print("thinking about", task["question"])
            return 7
        """,
        bwrap=bwrap,
    )
    assert (result.answer, result.reason) == ("7", None)
    assert "thinking about q" in result.stdout_tail


def test_syntax_error_names_the_line(run_harness):
    result = run_harness("x = 1\ndef run(task, llm, tools)\n    return 1\n")
    assert result.reason == "syntax_error"
    assert "line 2" in result.error


def test_exception_is_reported_with_the_harness_line(run_harness):
    result = run_harness("def run(task, llm, tools):\n    return {}['missing']\n")
    assert result.reason == "exception"
    assert result.error.startswith("KeyError: 'missing' (harness line 2)")
    assert "Traceback" in result.stderr_tail


def test_a_file_without_run_is_an_error(run_harness):
    assert run_harness("x = 1\n").reason == "no_run"


@pytest.mark.parametrize("bwrap", [True, False], ids=["bwrap", "rlimits-only"])
def test_infinite_loop_is_killed_at_the_wall_clock_limit(run_harness, bwrap):
    result = run_harness("def run(task, llm, tools):\n    while True: pass\n", wall_s=2, bwrap=bwrap)
    assert result.reason == "timeout"
    assert 2 <= result.wall_s < 10


def test_huge_output_is_cut_and_reported(run_harness):
    result = run_harness(
        """
        import os
        def run(task, llm, tools):
            print("x" * 50_000_000)          # captured: only the tail is kept
            os.write(1, b"y" * 5_000_000)    # straight to the pipe: over the output limit
            return 1
        """
    )
    assert result.reason == "output_limit"
    assert len(result.stdout_tail) <= 4000


def test_printing_a_lot_through_print_is_fine(run_harness):
    result = run_harness('def run(task, llm, tools):\n    print("z" * 50_000_000)\n    return 2\n')
    assert (result.answer, result.reason) == ("2", None)
    assert result.stdout_tail.strip().endswith("z" * 100)


def test_memory_limit(run_harness):
    result = run_harness(
        "def run(task, llm, tools):\n    x = bytearray(2 * 1024**3)\n    return 1\n", memory_mb=256
    )
    assert result.reason == "memory_limit"


def test_a_hard_exit_is_a_crash_with_its_code(run_harness):
    result = run_harness("import os\ndef run(task, llm, tools):\n    os._exit(3)\n")
    assert result.reason == "crash"
    assert "exit code 3" in result.error


@needs_bwrap
def test_no_network_not_even_loopback(run_harness):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        result = run_harness(
            f"""
            import socket
            def run(task, llm, tools):
                try:
                    socket.create_connection(("127.0.0.1", {port}), timeout=2)
                    return "connected"
                except OSError as exc:
                    return "blocked: " + type(exc).__name__
            """
        )
    finally:
        listener.close()
    assert result.answer.startswith("blocked")


@needs_bwrap
def test_host_files_and_secrets_are_out_of_reach(run_harness, tmp_path, monkeypatch):
    secret_file = tmp_path / "whale.db"
    secret_file.write_text("private")
    monkeypatch.setenv("WHALE_TEST_SECRET", "s3cret")
    result = run_harness(
        f"""
        import os
        def run(task, llm, tools):
            seen = []
            if os.path.exists({str(secret_file)!r}):
                seen.append("db")
            if os.environ.get("WHALE_TEST_SECRET"):
                seen.append("env")
            try:
                open("/usr/owned", "w")
                seen.append("wrote /usr")
            except OSError:
                pass
            open("/tmp/scratch", "w").write("fine")  # a private tmp is writable
            return ",".join(seen) or "nothing"
        """
    )
    assert result.answer == "nothing"
    assert os.environ["WHALE_TEST_SECRET"] == "s3cret"
    assert not os.path.exists("/usr/owned")
