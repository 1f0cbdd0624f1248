"""stories: two-number arithmetic word problems, the domain where both levers matter on a laptop.

Built so that the demo model (SmolLM2-135M) needs a better harness *and* better weights
(docs/stories.md says why, with the probe figures that chose it):
- Out of reach of training alone: the model cannot do two-digit arithmetic (0 of 40 right by
  itself, even with worked examples and greedy decoding). Under the seed harness, which asks it
  for the number, rollouts are almost never rewarded, so RFT under that harness has next to
  nothing to accept. A harness mechanism, the seed's `SOLVER = "program"` (the model writes the
  calculation, the harness evaluates it), removes the arithmetic.
- Out of reach of the harness alone: which operation a story asks for is reading, not
  arithmetic. The base model writes a subtraction for most stories, the adding ones included,
  so the program solver tops out near the share of subtracting stories; no prompt style,
  example count, temperature or vote changes which operation the model reads (a vote only
  makes its usual reading win). The model does write the right addition now and then, so RFT
  under a program harness has successes to amplify.
Generated from a fixed seed, so every machine sees the same train/harness/test splits; numbers
differ across splits, templates do not (the test asks the same kinds of stories).
"""

import random

from app.domains import SKILLS, SPLITS, Task
from app.domains.arith import SPLIT_SIZES, Arith

_SEED = 20261
# Two stories per operation; the operation is never named, only told.
STORIES = {
    "+": [
        "{name} had {a} {things}. A friend gave {name} {b} more. How many {things} does {name} "
        "have now?",
        "A shelf holds {a} {things} and a box holds {b} {things}. How many {things} are there "
        "in all?",
    ],
    "-": [
        "{name} had {a} {things} and gave {b} of them away. How many {things} does {name} have "
        "left?",
        "There were {a} {things} in a basket. {name} took {b}. How many {things} remain?",
    ],
}
NAMES = ["Ana", "Ben", "Caro", "Dev", "Eli", "Fay"]
THINGS = ["apples", "stamps", "marbles", "cards", "shells"]


def _generate() -> dict[str, list[Task]]:
    rng = random.Random(_SEED)
    seen: set[tuple] = set()
    splits: dict[str, list[Task]] = {s: [] for s in SPLITS}
    for split in SPLITS:  # a (numbers, operation) pair appears in one split only
        while len(splits[split]) < SPLIT_SIZES[split]:
            op = rng.choice(sorted(STORIES))
            a, b = sorted((rng.randint(10, 99), rng.randint(10, 99)), reverse=True)
            if (a, op, b) in seen or a == b:
                continue
            seen.add((a, op, b))
            story = rng.choice(STORIES[op])
            question = story.format(name=rng.choice(NAMES), things=rng.choice(THINGS), a=a, b=b)
            gold = a + b if op == "+" else a - b
            splits[split].append(
                Task(f"{split}-{len(splits[split])}", {"question": question}, str(gold))
            )
    return splits


class Stories(Arith):
    """Scored like arith (the last integer of the answer); started from arith's seed harness."""

    name = "stories"
    skill = SKILLS / "stories.md"

    def __init__(self):
        self._splits = _generate()
