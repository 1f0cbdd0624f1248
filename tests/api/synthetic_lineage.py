"""A WHALE run with two harness phases, written through the real writer: base -> weight phase 1
-> harness phase 1 -> weight phase 2 -> harness phase 2, with valid, invalid and accepted
candidates, one candidate with two parents and one whose parent is in the earlier phase.

    seed (incoming of phase 1, 0.10 under c1)
    ├── A program      phase 1 it 1   0.40
    │   ├── C examples phase 1 it 2   0.60  accepted in phase 1 (0.65 re-scored in phase 2)
    │   │   ├── E vote     phase 2 it 1   0.80  accepted in phase 2
    │   │   └── G broken   phase 2 it 1   invalid
    │   ├── D merge    phase 1 it 2   0.30  (parents A and seed)
    │   └── F retry    phase 2 it 1   0.50  (parent from phase 1)
    └── B syntax       phase 1 it 1   invalid

Shared by tests/api and tests/web.
"""

from dataclasses import dataclass

from app.db.schema import Checkpoint, Evaluation, Harness, Phase, Run
from tests.api.synthetic_store import Store

SEED_CODE = '''"""Arith seed: ask once, answer what the model says."""
PARAMS = {"solver": ["direct", "program"], "examples": [0, 3]}
SOLVER = "direct"
EXAMPLES = 0


def prompt(question):
    lines = ["Answer with a number."]
    for i in range(EXAMPLES):
        lines.append(f"Example {i}")
    lines.append(question)
    return "\\n".join(lines)


def parse(text):
    text = text.strip()
    if not text:
        return ""
    return text.split()[-1]


def run(task, llm, tools):
    reply = llm.chat([{"role": "user", "content": prompt(task["question"])}])
    return parse(reply)
'''
# A: the solver switched to program and the answer computed: changes at the top and the bottom,
# the prompt and parse functions in between untouched.
PROGRAM_CODE = SEED_CODE.replace('SOLVER = "direct"', 'SOLVER = "program"').replace(
    "    return parse(reply)\n",
    "    expression = parse(reply)\n    return str(eval(expression, {}))  # the harness computes\n",
)
EXAMPLES_CODE = PROGRAM_CODE.replace("EXAMPLES = 0", "EXAMPLES = 3")
SYNTAX_ERROR = "SyntaxError: invalid syntax (line 3)\n    SOLVER = = 'x'"
MISSING_RUN = "the harness defines no module-level run(task, llm, tools)"


@dataclass
class SearchRun:
    run: Run
    base: Checkpoint
    c1: Checkpoint
    c2: Checkpoint
    phase1: Phase
    phase2: Phase
    seed: Harness
    a: Harness  # program
    b: Harness  # syntax (invalid)
    c: Harness  # examples (accepted in phase 1)
    d: Harness  # merge (two parents)
    e: Harness  # vote (accepted in phase 2)
    f: Harness  # retry (parent in phase 1)
    g: Harness  # broken (invalid)


def _harness_eval(
    store: Store, run: Run, harness: Harness, checkpoint: Checkpoint, phase: Phase, success: float
) -> Evaluation:
    return store.write(
        Evaluation(
            run_id=run.id,
            harness_id=harness.id,
            checkpoint_id=checkpoint.id,
            split="harness",
            k=1,
            n_tasks=16,
            n_done=16,
            status="done",
            mean_at_k=success,
            mean_turns=1.5,
            phase_id=phase.id,
        )
    )


def search_run(store: Store) -> SearchRun:
    run = store.write(
        Run(name="whale arith", kind="experiment", domain="arith", status="done", strategy="whale")
    )
    base = store.write(Checkpoint(name="smol-base", kind="base", path="/models/smol"))
    c1 = store.write(
        Checkpoint(
            run_id=run.id, parent_id=base.id, kind="lora", name="smol-rft-1", path="/ckpt/run/job-1"
        )
    )
    seed = store.harness(run, name="seed.py", code=SEED_CODE, proposer="seed")
    store.write(
        Phase(
            run_id=run.id,
            kind="weight",
            round=1,
            status="done",
            harness_in_id=seed.id,
            harness_out_id=seed.id,
            checkpoint_in_id=base.id,
            checkpoint_out_id=c1.id,
        )
    )
    phase1 = store.write(
        Phase(run_id=run.id, kind="harness", round=1, harness_in_id=seed.id, checkpoint_in_id=c1.id)
    )

    def candidate(name, code, parents, phase, iteration, **kw):
        return store.harness(
            run,
            name=name,
            code=code,
            parent_id=parents[0],
            parent_ids=parents,
            phase_id=phase.id,
            iteration=iteration,
            proposer="llm",
            **kw,
        )

    a = candidate(
        "program",
        PROGRAM_CODE,
        [seed.id],
        phase1,
        1,
        axis="solver",
        hypothesis="let the model write the expression and compute it in the harness",
        changes="SOLVER = program; run() evaluates the expression",
    )
    b = candidate(
        "syntax", "SOLVER = = 'x'\n", [seed.id], phase1, 1, valid=False, error=SYNTAX_ERROR
    )
    c = candidate(
        "examples",
        EXAMPLES_CODE,
        [a.id],
        phase1,
        2,
        axis="prompt",
        hypothesis="three worked examples show the format",
    )
    d = candidate("merge", PROGRAM_CODE + "# merged\n", [a.id, seed.id], phase1, 2, axis="prompt")
    for harness, success in ((seed, 0.10), (a, 0.40), (c, 0.60), (d, 0.30)):
        _harness_eval(store, run, harness, c1, phase1, success)
    store.write_values(
        phase1, status="done", ended_reason="fixed", harness_out_id=c.id, checkpoint_out_id=c1.id
    )

    c2 = store.write(
        Checkpoint(
            run_id=run.id, parent_id=c1.id, kind="lora", name="smol-rft-2", path="/ckpt/run/job-2"
        )
    )
    store.write(
        Phase(
            run_id=run.id,
            kind="weight",
            round=2,
            status="done",
            harness_in_id=c.id,
            harness_out_id=c.id,
            checkpoint_in_id=c1.id,
            checkpoint_out_id=c2.id,
        )
    )
    phase2 = store.write(
        Phase(run_id=run.id, kind="harness", round=2, harness_in_id=c.id, checkpoint_in_id=c2.id)
    )
    e = candidate("vote", EXAMPLES_CODE + "VOTES = 3\n", [c.id], phase2, 1, axis="voting")
    f = candidate("retry", PROGRAM_CODE + "RETRIES = 2\n", [a.id], phase2, 1, axis="control")
    g = candidate("broken", "x = 1\n", [c.id], phase2, 1, valid=False, error=MISSING_RUN)
    for harness, success in ((c, 0.65), (e, 0.80), (f, 0.50)):
        _harness_eval(store, run, harness, c2, phase2, success)
    store.write_values(
        phase2, status="done", ended_reason="patience", harness_out_id=e.id, checkpoint_out_id=c2.id
    )
    return SearchRun(run, base, c1, c2, phase1, phase2, seed, a, b, c, d, e, f, g)


def large_search_run(store: Store, phases: int = 3, iterations: int = 8, k: int = 4) -> Run:
    """A run of `phases` harness phases x `iterations` x `k` candidates (about a hundred
    harnesses by default), scores and parents picked by a fixed rule: each candidate edits the
    accepted harness or, one in three, another valid candidate of the phase; one in seven is
    invalid. For checking that the tree stays readable at the size of a real search."""
    run = store.write(
        Run(
            name="whale arith (large)",
            kind="experiment",
            domain="arith",
            status="done",
            strategy="whale",
        )
    )
    checkpoint = store.write(Checkpoint(name="smol-base", kind="base"))
    accepted = store.harness(run, name="seed.py", code=SEED_CODE, proposer="seed")
    best, n = 0.05, 0
    for round_ in range(1, phases + 1):
        if round_ > 1:
            checkpoint = store.write(
                Checkpoint(
                    run_id=run.id, parent_id=checkpoint.id, kind="lora", name=f"smol-rft-{round_}"
                )
            )
        phase = store.write(
            Phase(
                run_id=run.id,
                kind="harness",
                round=round_,
                harness_in_id=accepted.id,
                checkpoint_in_id=checkpoint.id,
            )
        )
        _harness_eval(store, run, accepted, checkpoint, phase, best)
        valid = [accepted]
        for iteration in range(1, iterations + 1):
            made = []
            for _ in range(k):
                n += 1
                parent = valid[(n * 5) % len(valid)] if n % 3 == 0 else accepted
                broken = n % 7 == 0
                axis = ("prompt", "vote", "tools", "parse")[n % 4]
                harness = store.harness(
                    run,
                    name=f"r{round_}-i{iteration}-{axis}",
                    axis=axis,
                    code=SEED_CODE + f"# variant {n}\n",
                    parent_id=parent.id,
                    parent_ids=[parent.id],
                    phase_id=phase.id,
                    iteration=iteration,
                    proposer="llm",
                    valid=not broken,
                    error="SyntaxError: invalid syntax" if broken else None,
                )
                if not broken:
                    success = round(min(0.98, max(0.0, best + ((n * 37) % 31 - 24) / 100)), 3)
                    _harness_eval(store, run, harness, checkpoint, phase, success)
                    made.append((success, harness))
            valid += [h for _, h in made]
            top = max(made, key=lambda m: m[0], default=None)
            if top and top[0] > best:
                best, accepted = top
        store.write_values(phase, status="done", ended_reason="fixed", harness_out_id=accepted.id)
    return run
