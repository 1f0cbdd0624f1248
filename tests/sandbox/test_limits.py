"""Each backend runs ordinary, broken and resource-hungry harnesses to a recorded end."""


def test_a_plain_harness_returns_its_answer_and_prints(run_harness):
    result = run_harness(
        """
        def run(task, llm, tools):
            print("thinking about", task["question"])
            return 7
        """
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


def test_infinite_loop_is_killed_at_the_wall_clock_limit(run_harness):
    result = run_harness("def run(task, llm, tools):\n    while True: pass\n", wall_s=2)
    assert result.reason == "timeout"
    assert 2 <= result.wall_s < 30  # killed near the limit; generous for a loaded machine


def test_sleeping_past_the_limit_while_ignoring_sigterm(run_harness):
    result = run_harness(
        """
        import signal, time
        def run(task, llm, tools):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(60)
        """,
        wall_s=2,
    )
    assert result.reason == "timeout"


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
        "def run(task, llm, tools):\n    x = bytearray(10 * 1024**3)\n    return 1\n", memory_mb=256
    )
    assert result.reason == "memory_limit"


def test_a_hard_exit_is_a_crash_with_its_code(run_harness):
    result = run_harness("import os\ndef run(task, llm, tools):\n    os._exit(3)\n")
    assert result.reason == "crash"
    assert "exit code 3" in result.error


def test_a_huge_answer_is_cut(run_harness):
    result = run_harness("def run(task, llm, tools):\n    return 'a' * 10_000_000\n")
    assert result.reason is None
    assert len(result.answer) == 65536
