"""The run's archive as plain files: what the `agent` proposer (a coding agent) works in.

    <archive>/runs/<run>/
      SKILL.md                 the rules, the harness contract, this layout, what to write
      accepted.py              the accepted harness
      summary.tsv              every harness of the run: scores, hypothesis, axis, parents, error
      frontier.json            the current Pareto frontier
      harnesses/<id>-<name>/   harness.py, meta.json, scores.json (per checkpoint and split),
                               traces.jsonl (every rollout with every step), failures.txt,
                               successes.txt (a few flattened to text)
      reports/                 one report per earlier iteration
      candidates/              the agent writes <name>.py and <name>.json here

Nothing from the test split is ever written here.

`[search] workspace = "round"` gives each harness phase a fresh folder,
`<archive>/runs/<run>/round-<phase>/`, holding only that phase's harnesses (the incoming and
accepted ones included), their scores under the phase's checkpoint and the phase's reports: the
release starts a fresh directory each round, so its proposer sees only the current round.
"""

import csv
import json
import re
import shutil
from pathlib import Path

from sqlmodel import Session, col, func, select

from app.db.schema import Evaluation, Harness, Rollout, SearchIteration
from app.db.steps import load_steps
from app.domains import skill_of
from app.harness_code import declared_turns
from app.search import traces
from app.search.context import SearchContext
from app.search.rules import CONTRACT, RULES

SKILL = """\
# Harness search, iteration {iteration}

You improve the harness of an LLM agent for the `{domain}` domain. Read the files here, find why
rollouts fail, and write {k} new candidate harnesses.

## The harness contract
{contract}

## The {domain} domain
{skill}

## Turn budget
The accepted harness declares {declared}. This run clamps every harness at {clamp} model calls a
rollout: a harness declaring `MAX_TURNS = n` gets min(n, {clamp}) calls, one declaring none gets
{clamp}. How many turns to take is yours to choose: a search axis like any other.

## Rules
{rules}{fixed}

## What is here
- `accepted.py`: the harness to improve (#{accepted_id}).
- `summary.tsv`, `frontier.json`: every harness {shown} and its scores (success rate on
  the harness split, mean model calls per rollout).
- `harnesses/<id>-<name>/`: code, notes, scores, `traces.jsonl` (every rollout, every model and
  tool call), `failures.txt` and `successes.txt` (a few traces as text). Grep them.
- `reports/`: what earlier iterations tried and found.
- A shell, if you have one, runs in a sandbox holding this folder and the system's programs
  (python3, grep...): use it to count and compare traces. There is no network but your own API,
  and nothing of the machine outside this folder.

## What to write
- `candidates/<name>.py`: at most {k} complete harness files.
- `candidates/<name>.json`: {{"hypothesis": "...", "axis": "...", "changes": "...",
  "parents": [harness ids it builds on]}}.
- `reports/iteration-{phase}-{iteration}.md`: a short report of what you looked at and why.
Files anywhere else are ignored.
"""


def _slug(name: str) -> str:
    return re.sub(r"[^\w.-]+", "-", name).strip("-")[:60] or "harness"


def harness_dir(root: Path, harness: Harness) -> Path:
    return root / "harnesses" / f"{harness.id}-{_slug(Path(harness.name).stem)}"


def workspace_root(archive_dir: Path, ctx: SearchContext, scope: str = "run") -> Path:
    """The folder the proposer works in: the run's, or this harness phase's own."""
    root = archive_dir / "runs" / str(ctx.run_id)
    return root / f"round-{ctx.phase_id}" if scope == "round" else root


def _in_scope(ctx: SearchContext, harness: Harness, scope: str) -> bool:
    """Whether a harness of the run is shown: all of them, or this round's."""
    shown_anyway = (ctx.incoming.id, ctx.accepted.id)
    return scope == "run" or harness.phase_id == ctx.phase_id or harness.id in shown_anyway


def materialize(ctx: SearchContext, root: Path, scope: str = "run", fixed: list[str] = ()) -> Path:
    """Write (or bring up to date) the workspace; returns its path. `scope` "round": only
    this harness phase's harnesses, scores under its checkpoint and reports."""
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("harnesses", "reports", "candidates"):
        (root / sub).mkdir(exist_ok=True)
    checkpoint = ctx.checkpoint_id if scope == "round" else None
    with ctx.workbench.session() as s:
        harnesses = [
            h
            for h in s.exec(
                select(Harness).where(Harness.run_id == ctx.run_id).order_by(Harness.id)
            ).all()
            if _in_scope(ctx, h, scope)
        ]
        scores = _scores(s, ctx.run_id, checkpoint)
        for harness in harnesses:
            _write_harness(s, root, harness, scores.get(harness.id, []), checkpoint)
        for it in s.exec(select(SearchIteration).where(SearchIteration.run_id == ctx.run_id)):
            if scope == "round" and it.phase_id != ctx.phase_id:
                continue
            if it.report:
                path = root / "reports" / f"iteration-{it.phase_id}-{it.iteration}.md"
                if not path.exists():
                    path.write_text(it.report)
    (root / "accepted.py").write_text(ctx.accepted.code)
    _write_summary(root / "summary.tsv", harnesses, ctx)
    (root / "frontier.json").write_text(json.dumps([vars(p) for p in ctx.frontier], indent=1))
    (root / "SKILL.md").write_text(
        SKILL.format(
            iteration=ctx.iteration,
            phase=ctx.phase_id,
            domain=ctx.domain.name,
            k=ctx.k,
            contract=CONTRACT,
            skill=skill_of(ctx.domain) or "(this domain ships no guide: read its seed harness)",
            rules=RULES,
            accepted_id=ctx.accepted.id,
            shown="of this run"
            if scope == "run"
            else "of this round (this harness phase: its incoming harness and candidates)",
            **_turn_budget(ctx),
            fixed=(
                f"\n- Keep {', '.join(f'`{f}`' for f in fixed)} exactly as `accepted.py` has "
                "it: this run's candidates change the module around it (prompts, observation, "
                "parsing, checks, budgets, MAX_TURNS); a candidate that changes it is invalid."
            )
            if fixed
            else "",
        )
    )
    return root


def _turn_budget(ctx: SearchContext) -> dict:
    """The accepted harness's declared MAX_TURNS and the run's clamp, for SKILL.md."""
    from app.db.schema import Run
    from app.llm.generation import declared_by

    with ctx.workbench.session() as s:
        run = s.get(Run, ctx.run_id)
        given = (declared_by(run.config if run else None).get("rollout") or {}).get("max_calls")
    clamp = given or ctx.workbench.settings.rollout_max_calls
    n = declared_turns(ctx.accepted.code)
    return {"declared": f"`MAX_TURNS = {n}`" if n else "no `MAX_TURNS`", "clamp": clamp}


def _scores(s: Session, run_id: int, checkpoint_id: int | None = None) -> dict[int, list[dict]]:
    """Finished non-test evaluations of the run's harnesses (under one checkpoint if given),
    by harness."""
    query = select(Evaluation).where(
        Evaluation.run_id == run_id,
        col(Evaluation.split).in_(traces.PROPOSER_SPLITS),  # never test (nor its val rows)
        Evaluation.status == "done",
    )
    if checkpoint_id is not None:
        query = query.where(Evaluation.checkpoint_id == checkpoint_id)
    rows = s.exec(query).all()
    scores: dict[int, list[dict]] = {}
    for e in rows:
        scores.setdefault(e.harness_id, []).append(
            {
                "checkpoint_id": e.checkpoint_id,
                "split": e.split,
                "k": e.k,
                "n_tasks": e.n_tasks,
                "success": e.mean_at_k,
                "mean_turns": e.mean_turns,
                "evaluation_id": e.id,
            }
        )
    return scores


def _write_harness(
    s: Session, root: Path, harness: Harness, scores: list[dict], checkpoint_id: int | None
) -> None:
    folder = harness_dir(root, harness)
    folder.mkdir(exist_ok=True)
    (folder / "harness.py").write_text(harness.code)
    meta = {
        k: getattr(harness, k)
        for k in (
            "id",
            "name",
            "parent_ids",
            "proposer",
            "phase_id",
            "iteration",
            "hypothesis",
            "axis",
            "changes",
            "valid",
            "error",
        )
    }
    meta["parent_ids"] = harness.parent_ids or ([harness.parent_id] if harness.parent_id else [])
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    (folder / "scores.json").write_text(json.dumps(scores, indent=1))
    # Traces are append-only per harness: rewrite only when rollouts were added since last time.
    n = s.exec(
        select(func.count())
        .select_from(Rollout)
        .join(Evaluation)
        .where(
            Rollout.harness_id == harness.id,
            Rollout.status != "pending",
            col(Evaluation.split).in_(traces.PROPOSER_SPLITS),
            *([Rollout.checkpoint_id == checkpoint_id] if checkpoint_id is not None else []),
        )
    ).one()
    stamp = folder / ".n_rollouts"
    if stamp.exists() and stamp.read_text() == str(n):
        return
    rollouts = traces.rollouts_of(s, harness.id, checkpoint_id)
    steps = load_steps(s, [r.id for r in rollouts])
    records = [traces.record(r, steps[r.id]) for r in rollouts]
    with open(folder / "traces.jsonl", "w") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    failing = [r for r in records if r["status"] != "pass"][:5]
    passing = [r for r in records if r["status"] == "pass"][:3]
    (folder / "failures.txt").write_text("\n\n".join(traces.flatten(r) for r in failing))
    (folder / "successes.txt").write_text("\n\n".join(traces.flatten(r) for r in passing))
    stamp.write_text(str(n))


def _write_summary(path: Path, harnesses: list[Harness], ctx: SearchContext) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f, delimiter="\t")
        out.writerow(
            [
                "id",
                "name",
                "phase",
                "iteration",
                "proposer",
                "valid",
                "success",
                "mean_turns",
                "parents",
                "axis",
                "hypothesis",
                "error",
            ]
        )
        for h in harnesses:
            score = ctx.scores.get(h.id)
            out.writerow(
                [
                    h.id,
                    h.name,
                    h.phase_id,
                    h.iteration,
                    h.proposer,
                    h.valid,
                    f"{score.success:.4f}" if score else "",
                    f"{score.turns:.2f}" if score else "",
                    ",".join(map(str, h.parent_ids or [])),
                    h.axis or "",
                    (h.hypothesis or "").replace("\n", " "),
                    (h.error or "").replace("\n", " ")[:300],
                ]
            )


def clear_candidates(root: Path) -> Path:
    out = root / "candidates"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    return out
