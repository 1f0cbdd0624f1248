import re

from app.domains import SPLITS, get_domain
from app.domains.stories import Stories

ADDING = ("more", "in all")  # the adding stories' tell; the subtracting ones say away/remain


def _operation(question: str) -> str:
    return "+" if any(w in question for w in ADDING) else "-"


def test_splits_are_fixed_disjoint_and_hide_the_answer():
    a, b = Stories(), Stories()
    seen = {}
    for split in SPLITS:
        tasks = a.tasks(split)
        assert [(t.public, t.gold) for t in tasks] == [(t.public, t.gold) for t in b.tasks(split)]
        assert list(tasks[0].public) == ["question"]  # nothing says the operation
        seen[split] = {(t.public["question"], t.gold) for t in tasks}
    assert not seen["train"] & seen["test"] and not seen["harness"] & seen["test"]


def test_gold_is_the_sum_or_difference_the_story_tells_and_both_kinds_are_common():
    for split in SPLITS:
        tasks = get_domain("stories").tasks(split)
        kinds = []
        for task in tasks:
            question = task.public["question"]
            a, b = map(int, re.findall(r"\d+", question))
            kinds.append(_operation(question))
            assert task.gold == str(a + b if kinds[-1] == "+" else a - b)
            assert int(task.gold) > 0
            assert not re.search(r"[+\-*]|plus|minus|add|subtract|sum|difference", question)
        assert 0.35 < kinds.count("+") / len(kinds) < 0.65, split


def test_proposers_are_told_the_rules_but_not_the_operations():
    skill = get_domain("stories").skill.read_text()
    assert "addition or one\nsubtraction" in skill
    # an example story, but no word of a story tied to the operation it asks for
    assert not re.search(r"(more|in all|away|remain|took)[^.?]{0,60}(addition|subtraction)", skill)
    assert Stories.seed_harness.name == "seed.py" and Stories.seed_harness.parent.name == "arith"
