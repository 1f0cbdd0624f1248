"""The knobs proposer: coordinate descent over PARAMS, one rewritten assignment per candidate."""

import asyncio
from types import SimpleNamespace

from app.db.schema import sha_of
from app.domains import get_domain
from app.search.context import SearchContext
from app.search.knobs import KnobsProposer, current_values, declared_params, with_knob

CODE = '''"""doc"""
PARAMS = {"STYLE": ["a", "b", "c"], "VOTES": [1, 3]}
STYLE = "a"
VOTES = 1  # how many samples


def run(task, llm, tools):
    return STYLE * VOTES
'''


def propose(code: str, proposal: int, seen: set[str] = frozenset(), k: int = 3):
    """The run's `proposal`-th proposing iteration (1-based, counted over all its phases)."""
    harness = SimpleNamespace(id=7, code=code)
    ctx = SearchContext(
        workbench=None,
        run_id=1,
        phase_id=1,
        round=1,
        iteration=1,
        k=k,
        domain=get_domain("arith"),
        checkpoint_id=1,
        accepted=harness,
        incoming=harness,
        shas=set(seen),
        proposals_before=proposal - 1,
    )
    return asyncio.run(KnobsProposer().propose(ctx))


def test_params_and_values_are_read_from_the_module():
    assert declared_params(CODE) == {"STYLE": ["a", "b", "c"], "VOTES": [1, 3]}
    assert current_values(CODE)["STYLE"] == "a" and current_values(CODE)["VOTES"] == 1


def test_rewriting_a_knob_changes_only_its_line():
    new = with_knob(CODE, "VOTES", 3)
    changed = [(a, b) for a, b in zip(CODE.splitlines(), new.splitlines()) if a != b]
    assert changed == [("VOTES = 1  # how many samples", "VOTES = 3")]
    assert current_values(new)["VOTES"] == 3


def test_each_iteration_moves_the_next_coordinate_across_phases():
    first = propose(CODE, 1)
    assert [c.changes for c in first.candidates] == ["STYLE: 'a' -> 'b'", "STYLE: 'a' -> 'c'"]
    assert all(c.parent_ids == [7] and c.axis == "STYLE" for c in first.candidates)
    second = propose(CODE, 2)
    assert [c.changes for c in second.candidates] == ["VOTES: 1 -> 3"]


def test_tried_choices_are_skipped_and_k_caps_the_candidates():
    tried = {sha_of(with_knob(CODE, "STYLE", "b"))}
    assert [c.name for c in propose(CODE, 1, tried).candidates] == ["style-c"]
    assert len(propose(CODE, 1, k=1).candidates) == 1


def test_an_exhausted_or_knobless_harness_proposes_nothing():
    every = {sha_of(with_knob(CODE, "STYLE", v)) for v in "bc"} | {
        sha_of(with_knob(CODE, "VOTES", 3))
    }
    exhausted = propose(CODE, 1, every)
    assert exhausted.candidates == [] and "exhausted" in exhausted.report
    assert propose("def run(task, llm, tools):\n    return 1\n", 1).candidates == []
