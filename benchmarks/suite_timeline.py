"""Where the test suite's time goes: read the timeline that `WHALE_TEST_TIMELINE=FILE bash
scripts/test.sh` writes (a line per test, see tests/conftest.py) and print each worker's busy
and idle time, the modules that take the most, and the slowest tests.

    WHALE_TEST_TIMELINE=/tmp/timeline.jsonl bash scripts/test.sh
    python -m benchmarks.suite_timeline /tmp/timeline.jsonl
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path


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
    by_module = defaultdict(float)
    for row in rows:
        by_module[row["test"].split("::")[0]] += row["end"] - row["start"]
    total = sum(by_module.values())
    lines.append(f"modules by time (of {total:.0f} s of tests in all):")
    for module, seconds in sorted(by_module.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {seconds:7.1f} s  {100 * seconds / total:4.1f}%  {module}")
    lines.append("slowest tests:")
    for row in sorted(rows, key=lambda r: r["start"] - r["end"])[:top]:
        lines.append(f"  {row['end'] - row['start']:7.1f} s  {row['worker']}  {row['test']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    print(summary(load(args.timeline), args.top))


if __name__ == "__main__":
    main()
