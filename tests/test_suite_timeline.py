"""benchmarks/suite_timeline.py reads the timeline tests/conftest.py writes (WHALE_TEST_TIMELINE)
and says where the suite's time went: per worker, per module, per test."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def row(worker: str, test: str, start: float, end: float, cpu: float) -> dict:
    """A timeline line as tests/conftest.py writes it."""
    return {"worker": worker, "test": test, "start": start, "end": end, "cpu": cpu}


def report_of(tmp_path, lines: list[dict], *args: str) -> list[str]:
    """What `python -m benchmarks.suite_timeline` prints for a timeline of these lines."""
    timeline = tmp_path / "timeline.jsonl"
    timeline.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.suite_timeline", str(timeline), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ).stdout.splitlines()


def test_the_timeline_says_which_worker_idled_and_which_module_took_the_time(tmp_path):
    rows = [
        row("gw0", "tests/a/test_slow.py::test_one", 100.0, 160.0, cpu=50.0),
        row("gw0", "tests/a/test_slow.py::test_two", 160.0, 190.0, cpu=5.0),
        row("gw1", "tests/b/test_fast.py::test_x", 100.0, 110.0, cpu=1.5),
    ]
    out = report_of(tmp_path, rows, "--top", "2")
    assert out[0] == "3 tests, 90 s from the first start to the last end"
    assert out[1] == "  gw0: 2 tests, busy 90 s, done 0 s before the last worker"
    assert out[2] == "  gw1: 1 tests, busy 10 s, done 80 s before the last worker"
    assert out[3].startswith("processor time of the workers and their children: 56 s")
    assert out[4] == "modules by time (of 100 s of tests in all):"
    assert out[5].split() == ["90.0", "s", "90.0%", "cpu", "55.0", "s", "tests/a/test_slow.py"]
    assert out[-2].split() == [
        "60.0",
        "s",
        "cpu",
        "50.0",
        "s",
        "gw0",
        "tests/a/test_slow.py::test_one",
    ]


def test_the_timeline_counts_the_processor_time_of_a_test_s_child_processes(tmp_path):
    """The hook in tests/conftest.py, run by a pytest of its own: a test whose child process
    spins for a second is charged about a second, one that sleeps nearly nothing."""
    (tmp_path / "test_inner.py").write_text(
        "import subprocess, sys, time\n"
        "def test_spins():\n"
        "    subprocess.run([sys.executable, '-c',"
        " 'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1: pass'])\n"
        "def test_sleeps():\n"
        "    time.sleep(1)\n"
    )
    timeline = tmp_path / "timeline.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_inner.py"),
        ],
        cwd=REPO,
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "WHALE_TEST_TIMELINE": str(timeline)},
    )
    lines = [json.loads(line) for line in timeline.read_text().splitlines()]
    cpu = {line["test"].split("::")[1]: line["cpu"] for line in lines}
    assert 0.9 <= cpu["test_spins"] < 3
    assert cpu["test_sleeps"] < 0.2


def test_the_model_server_s_work_is_split_between_the_tests_running_at_the_time():
    from benchmarks.suite_timeline import server_shares

    def reading(decode: float) -> dict:
        return {"decode_seconds": decode, "generation_tokens": 10 * decode}

    a = row("gw0", "tests/a.py::test_a", 0.0, 10.0, cpu=1.0)
    b = row("gw1", "tests/b.py::test_b", 5.0, 15.0, cpu=1.0)
    c = row("gw0", "tests/c.py::test_c", 20.0, 25.0, cpu=1.0)
    a["server"] = {"start": reading(0), "end": reading(30)}
    b["server"] = {"start": reading(10), "end": reading(40)}
    c["server"] = {"start": reading(46), "end": reading(50)}
    shares = server_shares([a, b, c])
    # 0-5 s: a alone (10 s of decoding); 5-10 s: a and b (20, split); 10-15 s: b alone (10)
    assert shares["tests/a.py::test_a"]["decode_seconds"] == 20
    assert shares["tests/b.py::test_b"]["decode_seconds"] == 20
    assert shares["tests/b.py::test_b"]["generation_tokens"] == 200
    # 15-20 s no test ran: the server's work then is nobody's
    assert shares[""]["decode_seconds"] == 6
    assert shares["tests/c.py::test_c"]["decode_seconds"] == 4
    # two readings at the same moment (one worker's test ending as another's starts) are fine
    d = row("gw1", "tests/d.py::test_d", 25.0, 30.0, cpu=1.0)
    d["server"] = {"start": reading(50.5), "end": reading(51.5)}
    assert server_shares([a, b, c, d])["tests/d.py::test_d"]["decode_seconds"] >= 1


def test_a_new_report_keeps_the_run_it_replaces_as_a_row_of_the_runs_table():
    from benchmarks.suite_timeline import RUNS, RUNS_HEAD, TITLE, run_rows

    def timeline(stamp: str, commit: str, tests: int, span: int, workers: int, whole="") -> str:
        gws = "".join(
            f"  gw{i}: 9 tests, busy 9 s, done 0 s before the last worker\n" for i in range(workers)
        )
        whole = f"; scripts/test.sh took {whole} s in all, setting up included" if whole else ""
        return (
            f"\n## {TITLE}\n{stamp}; x86_64, 2 cores, load 1.9; commit {commit}\n\n```\n"
            f"{tests} tests, {span} s from the first start to the last end{whole}\n{gws}```\n"
        )

    # a run from before the whole script's time was recorded
    page = "# Benchmarks\n" + timeline("2026-12-05 23:00 UTC", "9f2752a", 1231, 1606, 2)
    first = run_rows(page)
    assert first == ["| 2026-12-05 23:00 UTC | 9f2752a | 2 | 1231 | 1606 s | not recorded |"]
    # the next report wrote the table and a new timeline; the one after keeps both runs
    page = (
        "# Benchmarks\n"
        + timeline("2026-12-06 01:40 UTC", "0123abc", 1236, 1150, 3, whole=1190)
        + f"\n## {RUNS}\nstamp\n\n{RUNS_HEAD}\n{first[0]}\n"
    )
    second = "| 2026-12-06 01:40 UTC | 0123abc | 3 | 1236 | 1150 s | 1190 s |"
    assert run_rows(page) == [first[0], second]
    # reporting the same run twice adds no row
    assert run_rows(page + second + "\n") == [first[0], second]
    # a table row written before the last column existed gets it
    old = page.replace(first[0], "| 2026-12-05 23:00 UTC | 9f2752a | 2 | 1231 | 1606 s |")
    assert run_rows(old) == [first[0], second]
    # a run on a tree no commit holds says so
    dirty = timeline("2026-12-06 02:00 UTC", "0123abc + uncommitted tree (--allow-dirty)", 9, 9, 1)
    assert run_rows(dirty)[0].startswith("| 2026-12-06 02:00 UTC | 0123abc + uncommitted | 1 |")


def test_the_whole_script_s_time_is_read_from_the_line_test_sh_adds(tmp_path):
    """scripts/test.sh appends the time it took in all to the timeline; the report says it."""
    rows = [row("gw0", "tests/a.py::test_a", 100.0, 160.0, cpu=1.0)]
    out = report_of(tmp_path, [*rows, {"script": "scripts/test.sh", "seconds": 75}])
    assert out[0] == (
        "1 tests, 60 s from the first start to the last end; "
        "scripts/test.sh took 75 s in all, setting up included"
    )
