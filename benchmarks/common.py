"""Shared bits of the benchmark scripts: percentiles, the report table, docs/benchmarks.md.

A section of docs/benchmarks.md names the commit its figures came from, read from git, never
typed. A tree with changes no commit holds is refused before the run starts (`parse`) and again
before writing (`report`); `--allow-dirty` runs it anyway, and the section then says
"uncommitted tree" beside the commit.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the store's code is imported where it is used: trainer_overhead runs without
    from app.db import Writer
    from app.db.schema import Rollout

REPO = Path(__file__).resolve().parent.parent
# Not code: the pages the scripts write, and the figures some of them keep as JSON.
NOT_CODE = (":!docs", ":!*.md", ":!benchmarks/results")
ALLOW_DIRTY = "--allow-dirty"


def percentile(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class DirtyTree(Exception):
    """The tree holds changes no commit has, and the script was not told to run on it."""


def commit(repo: Path = REPO) -> tuple[str, bool]:
    """HEAD's short hash, and whether the tree differs from it outside docs/, Markdown and
    benchmarks/results/: a tracked file changed, or an untracked one added (a new module the
    code may import). WHALE_COMMIT, where the checkout is a copy without its history (a GPU
    host), is taken as clean, and the stamp says whose word it is: nothing here can check it."""
    if os.environ.get("WHALE_COMMIT"):
        return f"{os.environ['WHALE_COMMIT']} (as WHALE_COMMIT says)", False

    def git(*args: str) -> str:
        found = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
        return found.stdout.strip() if found.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown", True
    return head, bool(git("status", "--porcelain", "--", ".", *NOT_CODE))


def stamp_commit(allow_dirty: bool, repo: Path = REPO) -> str:
    """The commit as a section names it; DirtyTree unless the tree is clean or `allow_dirty`."""
    head, dirty = commit(repo)
    if not dirty:
        return f"commit {head}"
    if not allow_dirty:
        raise DirtyTree(
            f"the tree at {repo} has changes no commit holds (git status), so figures from it "
            f"could not be traced to a commit: commit them, or run with {ALLOW_DIRTY} to have "
            "the section say 'uncommitted tree'"
        )
    if head == "unknown":
        return f"commit unknown: not a git checkout ({ALLOW_DIRTY})"
    return f"commit {head} + uncommitted tree ({ALLOW_DIRTY})"


def parse(
    parser: argparse.ArgumentParser,
    stamps: Callable[[argparse.Namespace], bool] = lambda a: True,
    repo: Path = REPO,
) -> argparse.Namespace:
    """The script's arguments, with `--allow-dirty` added; when this run will write
    docs/benchmarks.md (`stamps`), a dirty tree is refused now rather than after a long run."""
    parser.add_argument(
        ALLOW_DIRTY,
        action="store_true",
        help="run on a tree with uncommitted changes; its section says 'uncommitted tree'",
    )
    args = parser.parse_args()
    if stamps(args):
        try:
            stamp_commit(args.allow_dirty, repo)
        except DirtyTree as e:
            parser.error(str(e))
    return args


def section_span(text: str, title: str) -> tuple[int, int] | None:
    """Where the `## title` section of a Markdown page starts and ends (at the next `## `
    heading or the page's end), or None without one."""
    start = text.find(f"\n## {title}\n")
    if start < 0:
        return None
    end = text.find("\n## ", start + 1)
    return start, end if end >= 0 else len(text)


def report(
    title: str,
    body: str,
    notes: str = "",
    replace: bool = True,
    where: str | None = None,
    allow_dirty: bool | None = None,
    path: Path = REPO / "docs" / "benchmarks.md",
) -> None:
    """Print the section and write it to docs/benchmarks.md, in place of an earlier section of
    the same title (a benchmark keeps one current figure per title; `replace=False` appends).
    The section says the date, the machine and the commit it ran on; on a dirty tree nothing is
    written (the section is still printed) unless `allow_dirty` (default: `--allow-dirty` on the
    command line). `where`: the date, machine and commit the figures were measured on, when not
    here and now (the script stamped them there)."""
    if where is None:
        allowed = ALLOW_DIRTY in sys.argv[1:] if allow_dirty is None else allow_dirty
        try:
            stamped = stamp_commit(allowed, path.parent.parent)
        except DirtyTree as e:
            print(f"\n## {title}\n\n{body}\n\n{notes}\n")
            raise SystemExit(f"not written to {path}: {e}") from None
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        load = os.getloadavg()[0]  # the other work of a shared machine shows in the figures
        where = f"{stamp}; {machine()}, 1-minute load average {load:.1f} at the end; {stamped}"
    section = f"\n## {title}\n{where}\n\n{body}\n" + (f"\n{notes}\n" if notes else "")
    print(section)
    text = path.read_text()
    span = section_span(text, title)
    if replace and span:
        path.write_text(text[: span[0]] + section + text[span[1] :])
    else:
        with open(path, "a") as f:
            f.write(section)


def start_zero_llm(port: int) -> subprocess.Popen:
    import httpx

    proc = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "zero_llm.py"), str(port)])
    for _ in range(100):
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the zero-latency endpoint did not start")


def make_rollouts(writer: Writer, n: int) -> list[Rollout]:
    """n pending rollouts of one new evaluation: rows for recorded steps to point to."""
    from app.db.schema import Checkpoint, Evaluation, Harness, Rollout, Run

    def create(s):
        run = Run(name="bench", kind="eval", domain="arith")
        s.add(run)
        s.flush()
        harness, ckpt = Harness(run_id=run.id, name="h", code="", sha="h"), Checkpoint(name="zero")
        s.add_all([harness, ckpt])
        s.flush()
        ev = Evaluation(
            run_id=run.id,
            harness_id=harness.id,
            checkpoint_id=ckpt.id,
            split="test",
            k=1,
            n_tasks=n,
        )
        s.add(ev)
        s.flush()
        rows = [
            Rollout(
                run_id=run.id,
                evaluation_id=ev.id,
                harness_id=harness.id,
                checkpoint_id=ckpt.id,
                task_id=str(i),
                sample=0,
            )
            for i in range(n)
        ]
        s.add_all(rows)
        s.flush()
        return rows

    return writer.submit(create).result()
