"""Write the math domain's sample problems: data/math/train.jsonl and data/math/test.jsonl.

Every problem is generated here from a fixed seed, and its answer is worked out twice - once by
the formula that built the problem, once by sympy (solving, summing, counting) - and the two
must agree. train.jsonl is in the DAPO-Math-17K layout, test.jsonl in the AIME layout, so the
shipped samples exercise the same loaders as the real data sets.

    python scripts/make_math_problems.py [OUT_DIR]
"""

import json
import math
import random
import sys
from fractions import Fraction
from itertools import product
from pathlib import Path

import sympy

SEED = 1729
TRAIN, TEST = 320, 64
OUT = Path(__file__).resolve().parent.parent / "data" / "math"
x = sympy.Symbol("x")
# DAPO-Math-17K's own wrapper around each problem (the loader removes it again).
DAPO_HEAD = (
    "Solve the following math problem step by step. The last line of your response should "
    "be of the form Answer: $Answer (without quotes) where $Answer is the answer to the "
    "problem.\n\n"
)
DAPO_TAIL = '\n\nRemember to put your answer on its own line after "Answer:".'


def latex(value) -> str:
    value = sympy.nsimplify(value)
    if value.is_Integer:
        return str(int(value))
    p, q = sympy.fraction(value)
    sign = "-" if p < 0 else ""
    return f"{sign}\\frac{{{abs(p)}}}{{{q}}}"


def linear(rng):
    a, sol, b = rng.randint(2, 12), rng.randint(-20, 20), rng.randint(-30, 30)
    c = a * sol + b
    (found,) = sympy.solve(a * x + b - c, x)
    assert found == sol
    sign = "+" if b >= 0 else "-"
    return f"Solve for $x$: ${a}x {sign} {abs(b)} = {c}$.", found


def fractions(rng):
    (pn, pd), (qn, qd) = [(rng.randint(1, 9), rng.randint(2, 12)) for _ in range(2)]
    op = rng.choice(["+", "-", "\\times"])
    p, q = Fraction(pn, pd), Fraction(qn, qd)
    exact = {"+": p + q, "-": p - q, "\\times": p * q}[op]
    a, b = sympy.Rational(pn, pd), sympy.Rational(qn, qd)
    checked = {"+": a + b, "-": a - b, "\\times": a * b}[op]
    assert checked == sympy.Rational(exact.numerator, exact.denominator)
    return (f"Compute $\\frac{{{pn}}}{{{pd}}} {op} \\frac{{{qn}}}{{{qd}}}$ and simplify."), checked


def series(rng):
    k = sympy.Symbol("k", integer=True)
    if rng.random() < 0.5:
        start, step, n = rng.randint(1, 20), rng.randint(1, 9), rng.randint(5, 40)
        closed = n * (2 * start + (n - 1) * step) // 2
        summed = sympy.summation(start + (k - 1) * step, (k, 1, n))
        terms = (
            f"{start} + {start + step} + {start + 2 * step} + \\cdots + {start + (n - 1) * step}"
        )
        text = f"Find the sum ${terms}$ of an arithmetic progression."
    else:
        n = rng.randint(3, 30)
        closed = n * (n + 1) * (2 * n + 1) // 6
        summed = sympy.summation(k**2, (k, 1, n))
        text = f"Find $1^2 + 2^2 + 3^2 + \\cdots + {n}^2$."
    assert summed == closed
    return text, summed


def gcd_lcm(rng):
    a, b = rng.randint(12, 600), rng.randint(12, 600)
    if rng.random() < 0.5:
        assert sympy.gcd(a, b) == math.gcd(a, b)
        return f"What is the greatest common divisor of ${a}$ and ${b}$?", sympy.gcd(a, b)
    assert sympy.lcm(a, b) == a * b // math.gcd(a, b)
    return f"What is the least common multiple of ${a}$ and ${b}$?", sympy.lcm(a, b)


def probability(rng):
    if rng.random() < 0.5:
        target = rng.randint(2, 12)
        count = sum(1 for d1, d2 in product(range(1, 7), repeat=2) if d1 + d2 == target)
        value = sympy.Rational(count, 36)
        assert value == sympy.Rational(6 - abs(target - 7), 36)
        return (
            f"Two fair six-sided dice are rolled. What is the probability that the sum of the "
            f"numbers shown is ${target}$? Express your answer as a common fraction."
        ), value
    red, blue = rng.randint(2, 9), rng.randint(1, 9)
    value = sympy.Rational(sympy.binomial(red, 2), sympy.binomial(red + blue, 2))
    assert value == Fraction(red * (red - 1), (red + blue) * (red + blue - 1))
    return (
        f"A bag holds ${red}$ red balls and ${blue}$ blue balls. Two balls are drawn at random "
        f"without replacement. What is the probability that both are red? Express your answer "
        f"as a common fraction."
    ), value


def quadratic(rng):
    r, s = rng.sample(range(-15, 16), 2)
    b, c = -(r + s), r * s
    roots = sympy.solve(x**2 + b * x + c, x)
    assert sorted(roots) == sorted([r, s])
    poly = sympy.latex(x**2 + b * x + c)
    return f"What is the larger root of the equation ${poly} = 0$?", max(roots)


KINDS = [linear, fractions, series, gcd_lcm, probability, quadratic]


def generate(total: int, rng: random.Random, seen: set[str]) -> list[tuple[str, str]]:
    problems = []
    while len(problems) < total:
        question, value = KINDS[len(problems) % len(KINDS)](rng)
        if question not in seen:  # every question appears once, in one file only
            seen.add(question)
            problems.append((question, latex(value)))
    return problems


def main(out: Path = OUT) -> None:
    rng, seen = random.Random(SEED), set()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "test.jsonl", "w") as f:
        for i, (question, answer) in enumerate(generate(TEST, rng, seen)):
            f.write(
                json.dumps({"id": f"gen-test-{i}", "problem": question, "answer": answer}) + "\n"
            )
    with open(out / "train.jsonl", "w") as f:
        for i, (question, answer) in enumerate(generate(TRAIN, rng, seen)):
            f.write(
                json.dumps(
                    {
                        "data_source": "whale-generated",
                        "ability": "MATH",
                        "prompt": [{"role": "user", "content": DAPO_HEAD + question + DAPO_TAIL}],
                        "reward_model": {"ground_truth": answer, "style": "rule"},
                        "extra_info": {"index": f"gen-train-{i}"},
                    }
                )
                + "\n"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
