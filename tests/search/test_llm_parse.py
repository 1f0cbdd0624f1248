"""Reading candidates out of a chat reply, however loosely the model followed the format."""

from app.search.llm_proposer import parse_candidates

GOOD = "def run(task, llm, tools):\n    return '1'\n"


def test_the_requested_format_gives_named_candidates_with_notes():
    reply = f"""Here you go.

### Candidate: vote-more
Hypothesis: majority voting over 3 samples fixes unstable answers
Axis: voting
Changes: VOTES loop
```python
{GOOD}```

### Candidate 2: strict parse
**Hypothesis:** stricter extraction
```py
{GOOD.replace("'1'", "'2'")}```
"""
    a, b = parse_candidates(reply, parent_id=4)
    assert (a.name, a.axis, a.changes, a.parent_ids) == ("vote-more", "voting", "VOTES loop", [4])
    assert a.hypothesis.startswith("majority voting") and a.code == GOOD and a.error is None
    assert b.name == "strict-parse" and "'2'" in b.code and b.hypothesis == "stricter extraction"


def test_without_headers_every_code_block_is_a_candidate():
    cands = parse_candidates(f"```python\n{GOOD}```\ntext\n```\n{GOOD}```", parent_id=1)
    assert len(cands) == 2 and all(c.code == GOOD for c in cands)


def test_the_block_defining_run_wins_over_helper_snippets():
    reply = f"### Candidate: x\n```python\nprint('example usage')\n```\n```python\n{GOOD}```"
    assert parse_candidates(reply, 1)[0].code == GOOD


def test_a_truncated_reply_still_yields_its_code():
    (cand,) = parse_candidates(f"### Candidate: cut\n```python\n{GOOD}", 1)
    assert cand.code == GOOD


def test_a_section_without_code_is_an_invalid_candidate():
    (cand,) = parse_candidates("### Candidate: talk\nHypothesis: I would add voting.\n", 1)
    assert cand.code is None and cand.error == "no code block in the reply"
    (empty,) = parse_candidates("I cannot help with that.", 1)
    assert empty.code is None and empty.name == "candidate-1"
