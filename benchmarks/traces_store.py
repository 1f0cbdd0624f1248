"""A synthetic store of 10k to 1M rollouts for the trace browser benchmark, built by bulk SQL.

The rows are shaped like real ones: runs of alternating weight and harness phases, search
candidates evaluated on the harness split, RFT sampling on train, test evaluations after every
phase, statuses that depend on harness, checkpoint and task, tracebacks on errors, compressed
task fields, and steps on some rollouts (one of them a 600-step trace).

Built once per size and schema under ~/.cache/whale/bench/ (the file name carries both), so a
rerun starts measuring at once. The writer queue is bypassed: inserting a million rows one
transaction at a time would take hours, and only the reading side is measured.
"""

import hashlib
import json
import random
import sqlite3
import zlib
from datetime import datetime, timedelta
from pathlib import Path

from app.db import open_engine
from app.db.migrations import MIGRATIONS

CACHE = Path.home() / ".cache" / "whale" / "bench"
SHAPE_VERSION = 2  # bump when the generated data changes
RUNS = 8
HARNESS_CANDIDATES = 4  # per search iteration
LONG_TRACE_STEPS = 600
STEP_SHARE = 0.02  # rollouts that carry a short recorded trace

ERRORS = [
    ("exception", "ZeroDivisionError: division by zero"),
    ("exception", "KeyError: 'answer'"),
    ("exception", "ValueError: could not convert string to float: 'forty-two'"),
    ("exception", "RecursionError: maximum recursion depth exceeded"),
    ("syntax_error", "SyntaxError: invalid syntax"),
    ("output_limit", "OutputLimit: stdout exceeded 65536 bytes"),
    ("bad_answer", "BadAnswer: run() returned a dict, expected str"),
]
FAIL_ANSWERS = ["I think it is {n}", "{n}", "The answer is {n}.", "unknown", "{n}.0"]


def schema_version() -> str:
    text = "".join(name + sql for name, sql in MIGRATIONS)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def store_path(n_rollouts: int) -> Path:
    return CACHE / f"traces-{n_rollouts}-s{schema_version()}-v{SHAPE_VERSION}" / "whale.db"


def zjson(value) -> bytes:
    """What app.db.schema.ZJSON stores."""
    return zlib.compress(json.dumps(value, ensure_ascii=False).encode(), 3)


def traceback(message: str, line: int) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/sandbox/runner.py", line 88, in main\n    answer = harness.run(task, llm, tools)\n'
        f'  File "/sandbox/harness.py", line {line}, in run\n    return solve(parse(reply))\n'
        f'  File "/sandbox/harness.py", line {line + 14}, in solve\n    return eval(expr)\n'
        f"{message}\n"
    )


class Builder:
    def __init__(self, conn: sqlite3.Connection, n_rollouts: int, seed: int = 7):
        self.conn = conn
        self.n = n_rollouts
        self.rng = random.Random(seed)
        self.clock = datetime(2026, 10, 1, 8, 0, 0)
        self.ids = {
            "run": 0,
            "harness": 0,
            "checkpoint": 0,
            "evaluation": 0,
            "phase": 0,
            "rollout": 0,
            "step": 0,
        }
        self.rollouts: list[tuple] = []
        self.steps: list[tuple] = []
        self.tasks = {
            split: [self._task(split, i) for i in range(size)]
            for split, size in (("train", 400), ("harness", 50), ("test", 100))
        }
        self.model_blobs = (
            zjson(
                {
                    "messages": [
                        {"role": "system", "content": "Solve it."},
                        {"role": "user", "content": "What is 17 + 25?"},
                    ],
                    "temperature": 1.0,
                    "max_tokens": 48,
                }
            ),
            zjson({"message": {"role": "assistant", "content": "42"}, "finish_reason": "stop"}),
        )
        self.tool_blobs = (zjson({"args": ["17 + 25"], "kwargs": {}}), zjson({"result": 42}))

    def _task(self, split: str, i: int) -> dict:
        a, b = (i * 37) % 90 + 10, (i * 41) % 89 + 10
        return {
            "id": f"{split}-{i}",
            "blob": zjson({"question": f"What is {a} + {b}?"}),
            "gold": str(a + b),
            "difficulty": ((i * 7919) % 100) / 100,
        }

    def _tick(self, seconds: float = 0.5) -> str:
        self.clock += timedelta(seconds=seconds)
        return self.clock.strftime("%Y-%m-%d %H:%M:%S.%f")

    def _insert(self, table: str, row: dict) -> int:
        self.ids[table] += 1
        row = {"id": self.ids[table], "created_at": self._tick(), **row}
        names = ", ".join(row)
        self.conn.execute(
            f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})",
            list(row.values()),
        )
        return self.ids[table]

    def build(self) -> None:
        base = self._insert(
            "checkpoint", {"kind": "base", "name": "HuggingFaceTB/SmolLM2-135M-Instruct"}
        )
        per_run = self.n // RUNS
        for r in range(RUNS):
            target = self.n if r == RUNS - 1 else (r + 1) * per_run
            self._run(r, base, target, running=r == RUNS - 1)
        self._flush()

    def _run(self, r: int, base: int, target: int, running: bool) -> None:
        run = self._insert(
            "run",
            {
                "name": f"bench run {r}",
                "kind": "experiment",
                "domain": "arith",
                "status": "running" if running else "done",
                "strategy": ("whale", "harness_only", "weight_only", "stagewise")[r % 4],
            },
        )
        harness = self._harness(run, None, None, "seed.py", quality=0.3)
        checkpoint, skill = base, 0.0
        quality = {harness: 0.3}
        round_ = 0
        while self.ids["rollout"] < target:
            round_ += 1
            kind = "weight" if round_ % 2 else "harness"
            phase = self._insert(
                "phase",
                {"run_id": run, "kind": kind, "round": round_, "status": "done", "rollouts": 0},
            )
            if kind == "weight":
                self._evaluation(
                    run,
                    phase,
                    harness,
                    checkpoint,
                    "train",
                    32,
                    4,
                    quality[harness] + skill,
                    target,
                )
                skill = min(skill + 0.02, 0.15)  # RFT helps, then saturates
                checkpoint = self._insert(
                    "checkpoint",
                    {
                        "run_id": run,
                        "parent_id": checkpoint,
                        "kind": "lora",
                        "name": f"/runs/{run}/job-{round_}/adapter",
                        "size_bytes": 9_000_000,
                    },
                )
            else:
                for iteration in range(1, 4):
                    for c in range(HARNESS_CANDIDATES):
                        q = min(0.75, max(0.02, quality[harness] + self.rng.uniform(-0.2, 0.1)))
                        candidate = self._harness(
                            run, harness, phase, f"r{round_}-i{iteration}-c{c}.py", q
                        )
                        quality[candidate] = q
                        self._evaluation(
                            run, phase, candidate, checkpoint, "harness", 50, 2, q + skill, target
                        )
                    harness = max(quality, key=quality.get)
            self._evaluation(
                run, phase, harness, checkpoint, "test", 100, 2, quality[harness] + skill, target
            )
        if running:  # the newest evaluation is still going: its last rollouts are pending
            self._flush()
            self.conn.execute(
                "UPDATE rollout SET status = 'pending', answer = NULL, error = NULL,"
                " reason = NULL, reward = NULL, finished_at = NULL WHERE id > ?",
                (self.ids["rollout"] - 60,),
            )

    def _harness(self, run, parent, phase, name, quality) -> int:
        code = f"# {name}\nQUALITY = {quality:.2f}\n\ndef run(task, llm, tools):\n    return llm(task['question'])\n"
        return self._insert(
            "harness",
            {
                "run_id": run,
                "parent_id": parent,
                "name": name,
                "code": code,
                "sha": hashlib.sha256(code.encode()).hexdigest(),
                "proposer": "seed" if parent is None else "knobs",
                "valid": True,
                "phase_id": phase,
            },
        )

    def _evaluation(self, run, phase, harness, checkpoint, split, n_tasks, k, p_pass, target):
        evaluation = self._insert(
            "evaluation",
            {
                "run_id": run,
                "harness_id": harness,
                "checkpoint_id": checkpoint,
                "split": split,
                "k": k,
                "n_tasks": n_tasks,
                "status": "done",
                "n_done": n_tasks * k,
                "phase_id": phase,
            },
        )
        tasks = self.tasks[split]
        start = self.rng.randrange(len(tasks))
        rewards = []
        for t in range(n_tasks):
            task = tasks[(start + t) % len(tasks)]
            for sample in range(k):
                if self.ids["rollout"] >= target:
                    break
                p = min(0.85, max(0.03, p_pass - task["difficulty"] + 0.3))
                rewards.append(self._rollout(run, evaluation, harness, checkpoint, task, sample, p))
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        self.conn.execute(
            "UPDATE evaluation SET mean_at_k = ?, n_done = ? WHERE id = ?",
            (mean, len(rewards), evaluation),
        )

    def _rollout(self, run, evaluation, harness, checkpoint, task, sample, p_pass) -> float:
        self.ids["rollout"] += 1
        rollout_id = self.ids["rollout"]
        rng = self.rng
        roll = rng.random()
        reason = error = answer = stdout = None
        if roll < p_pass:
            status, answer = "pass", task["gold"]
        elif roll < p_pass + (1 - p_pass) * 0.75:
            status = "fail"
            answer = rng.choice(FAIL_ANSWERS).format(n=int(task["gold"]) + rng.randint(1, 20))
        elif roll < p_pass + (1 - p_pass) * 0.94:
            status = "error"
            reason, message = rng.choice(ERRORS)
            error = traceback(message, rng.randint(5, 60))
        else:
            status, reason = "timeout", "timeout"
            error = "rollout exceeded its 60 s wall time"
        if rng.random() < 0.3:
            stdout = f"thinking about {task['id']}\n" * rng.randint(1, 20)
        turns = rng.randint(1, 4)
        created = self._tick(0.05)
        self.rollouts.append(
            (
                rollout_id,
                run,
                evaluation,
                harness,
                checkpoint,
                task["id"],
                sample,
                task["blob"],
                task["gold"],
                status,
                reason,
                error,
                answer,
                1.0 if status == "pass" else 0.0,
                turns,
                turns * 180,
                turns * 12,
                round(rng.uniform(0.2, 8.0), 2),
                stdout,
                None,
                created,
                created,
            )
        )
        n_steps = (
            LONG_TRACE_STEPS
            if rollout_id == self.n // 2
            else (turns * 2 if rng.random() < STEP_SHARE else 0)
        )
        for idx in range(n_steps):
            self.ids["step"] += 1
            model = idx % 2 == 0
            request, response = self.model_blobs if model else self.tool_blobs
            self.steps.append(
                (
                    self.ids["step"],
                    rollout_id,
                    idx,
                    "model" if model else "tool",
                    None if model else "calculator",
                    request,
                    response,
                    None,
                    180 if model else 0,
                    12 if model else 0,
                    120.0,
                    created,
                )
            )
        if len(self.rollouts) >= 20_000:
            self._flush()
        return 1.0 if status == "pass" else 0.0

    def _flush(self) -> None:
        self.conn.executemany(
            "INSERT INTO rollout (id, run_id, evaluation_id, harness_id, checkpoint_id, task_id,"
            " sample, task, gold, status, reason, error, answer, reward, turns, prompt_tokens,"
            " completion_tokens, wall_s, stdout_tail, stderr_tail, created_at, finished_at)"
            f" VALUES ({', '.join('?' * 22)})",
            self.rollouts,
        )
        self.conn.executemany(
            "INSERT INTO step (id, rollout_id, idx, kind, tool, request, response, error,"
            " prompt_tokens, completion_tokens, latency_ms, created_at)"
            f" VALUES ({', '.join('?' * 12)})",
            self.steps,
        )
        self.rollouts.clear()
        self.steps.clear()


def build(n_rollouts: int, say=print) -> Path:
    """The cached store with `n_rollouts` rollouts, built first when missing."""
    path = store_path(n_rollouts)
    if path.exists():
        return path
    say(f"building {n_rollouts:,} rollouts into {path} ...")
    tmp = path.with_name("building.db")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    for leftover in tmp.parent.glob("building.db*"):
        leftover.unlink()
    open_engine(tmp).dispose()  # the real schema, through the real migrations
    conn = sqlite3.connect(tmp, isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-400000")
    # Filling the tables first and indexing afterwards is several times faster than keeping
    # nine indexes of rollout up to date row by row.
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index'"
        " AND tbl_name IN ('rollout', 'step') AND sql IS NOT NULL"
    ).fetchall()
    conn.execute("BEGIN")
    for name, _ in indexes:
        conn.execute(f"DROP INDEX {name}")
    Builder(conn, n_rollouts).build()
    for _, sql in indexes:
        conn.execute(sql)
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    tmp.rename(path)
    return path
