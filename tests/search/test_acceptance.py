"""The commit gate (app/search/acceptance.py): its rules on simulated phases with the truth
known, and the sequential rule in a real harness phase on the demo model."""

import math

from app.experiment_schema import SearchConfig
from app.search.acceptance import paired_gate, sequential
from app.search.knobs import with_knob
from benchmarks.commit_gate import simulate
from tests.search.conftest import SEED


def test_the_gates_hold_their_false_commit_level_and_sequential_spends_less():
    level = 0.05
    # The level bounds the commits of a candidate no better than the incumbent; an equal one is
    # the hardest case, so it is checked on equal candidates alone (pooled with worse ones, which
    # are almost never committed, a gate committing 15% of equal ones would look like 7.5%).
    # 400 equal candidates per rule, the bound the level plus three binomial standard errors
    # (0.083): a gate at the level stays under it, one committing 15% of them lands near 0.15
    # (under 0.083 with a chance below 1 in 10,000).
    n_equal = 400
    equal = simulate(repeats=n_equal, n_tasks=128, level=level, seed=7, shifts=(0.0,))
    bound = level + 3 * math.sqrt(level * (1 - level) / n_equal)
    assert bound < 0.09
    assert equal["paired"]["equal_commits"] <= bound, equal["paired"]
    assert equal["sequential"]["equal_commits"] <= bound, equal["sequential"]
    # greedy commits an equal candidate whenever noise favours it (about half of them here)
    assert equal["greedy"]["equal_commits"] > 0.3, equal["greedy"]

    results = simulate(repeats=60, n_tasks=128, level=level, seed=7)
    fixed, seq = results["paired"], results["sequential"]
    # a worse candidate (-0.10 on every task) is committed even less often than an equal one
    assert fixed["worse_commits"] <= level and seq["worse_commits"] <= level, (fixed, seq)
    # the anytime-valid test stops early for hopeless and clearly better candidates
    assert seq["rollouts"] < 0.9 * fixed["rollouts"] == 0.9 * 128, (seq, fixed)
    # and still finds the better candidate often; the fixed test more often
    assert fixed["power"] >= 0.7 and seq["power"] >= 0.4, (fixed, seq)


def test_sequential_commits_early_on_strong_evidence_and_gives_up_on_hopeless():
    wins = sequential([1.0] * 12, total=64, level=0.05)
    assert wins.commit and wins.why == "evidence" and wins.n_tasks < 12 and wins.statistic >= 20
    losses = sequential([-1.0] * 60, total=64, level=0.05)
    assert not losses.commit and losses.why == "hopeless" and losses.n_tasks < 60
    assert sequential([0.0] * 10, total=64, level=0.05) is None  # undecided: go on
    # ties only: it gives up once even winning every task left could not reach 1 / level
    tied = sequential([0.0] * 64, total=64, level=0.05)
    assert not tied.commit and tied.why == "hopeless" and 40 < tied.n_tasks < 64


def test_paired_gate_needs_a_significant_improvement():
    tasks = [f"t{i}" for i in range(30)]
    incumbent = dict.fromkeys(tasks, 0.0)
    slightly = {**incumbent, "t0": 1.0, "t1": 1.0}  # two wins: not enough at 5%
    clearly = {**incumbent, **dict.fromkeys(tasks[:12], 1.0)}
    assert not paired_gate(incumbent, slightly, 0.05).commit
    decision = paired_gate(incumbent, clearly, 0.05)
    assert decision.commit and decision.statistic < 0.001 and decision.n_tasks == 30


def test_a_sequential_phase_commits_the_better_harness_and_stops_its_evaluation_early(search):
    cfg = SearchConfig(
        proposer="knobs",
        candidates=2,
        tasks=24,
        acceptance="sequential",
        false_commit=0.1,
        sequential_chunk=4,
    )
    # one knob: the one iteration proposes SOLVER = "program", which the model can work with;
    # greedy decoding, so the phase is the same on every run
    seed = with_knob(SEED.read_text(), "TEMPERATURE", 0.0)
    start, end = seed.index("PARAMS = {"), seed.index("}\n", seed.index("PARAMS = {")) + 2
    code = seed[:start] + 'PARAMS = {"SOLVER": ["model", "program"]}\n' + seed[end:]
    phase, stored, _ = search(cfg, harness_code=code, iterations=1)
    by_id = {h.id: h for h in stored["harnesses"]}
    gates = {int(h): g for it in stored["iterations"] for h, g in (it.gate or {}).items()}
    assert stored["iterations"][0].gate is None  # iteration 0: the incumbent itself
    assert gates and all(g["rule"] == "sequential" for g in gates.values())
    for g in gates.values():  # whole chunks of 4 tasks ran, past where the test stopped
        assert g["n_tasks"] <= g["rollouts"] <= 24 and g["rollouts"] % 4 == 0
        assert (g["why"] == "evidence") == g["commit"]
    program = [h for h, g in gates.items() if by_id[h].axis == "SOLVER"]
    assert program and gates[program[0]]["commit"], gates
    # committed on part of the split, in chunks of 4: the candidate's evaluation stopped there
    n = gates[program[0]]["n_tasks"]
    assert n < 24
    evaluations = {r.evaluation_id: [] for r in stored["rollouts"] if r.harness_id == program[0]}
    for r in stored["rollouts"]:
        if r.harness_id == program[0]:
            evaluations[r.evaluation_id].append(r)
    smoke, split = sorted(evaluations.values(), key=len)  # its smoke rollout, then the split
    assert len(smoke) == 1 and len(split) % 4 == 0 and n <= len(split) < n + 4
    assert all(r.status != "pending" for r in split)
    assert phase.harness_out_id == program[0]
