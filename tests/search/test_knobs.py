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


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    assert len(before.splitlines()) == len(after.splitlines())
    return [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]


def test_rewriting_a_knob_changes_only_its_value():
    new = with_knob(CODE, "VOTES", 3)  # the line's comment stays
    assert changed_lines(CODE, new) == [
        ("VOTES = 1  # how many samples", "VOTES = 3  # how many samples")
    ]
    assert current_values(new)["VOTES"] == 3
    # the file's quote style stays; a quote or a non-ASCII letter in the value is kept exact
    assert changed_lines(CODE, with_knob(CODE, "STYLE", "b")) == [('STYLE = "a"', 'STYLE = "b"')]
    tricky = 'say "é"\n'
    assert current_values(with_knob(CODE, "STYLE", tricky))["STYLE"] == tricky
    single = CODE.replace('STYLE = "a"', "STYLE = 'a'  # é")
    assert changed_lines(single, with_knob(single, "STYLE", "c")) == [
        ("STYLE = 'a'  # é", "STYLE = 'c'  # é")
    ]
    # a value laid out over several lines keeps its layout
    multi = CODE.replace("VOTES = 1", "VOTES = (\n    1\n)")
    assert with_knob(multi, "VOTES", 5) == multi.replace("    1\n", "    5\n")


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
