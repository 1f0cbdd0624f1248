"""The math verifier: the last `\\boxed{...}` of a reply, compared with the gold answer.

Extraction is strict: only a braced `\\boxed{...}` or `\\fbox{...}` counts (the last one, braces
balanced); a reply without one scores 0. Equivalence, in order:
1. equal after normalising the LaTeX (spaces, `$`, `\\left`/`\\right`, `\\dfrac`, degrees, a
   trailing `\\text{unit}`, thousands separators, a leading `x =`);
2. equal as numbers: `\\frac{1}{2}`, `1/2` and `0.5` are one value (relative tolerance 1e-9);
3. equal as expressions by sympy: `\\frac{\\sqrt{2}}{2}` is `\\sqrt{2}/2`.
Comma-separated answers (roots, tuples) match element by element, in any order.

LaTeX is turned into a sympy expression by a small translator, not sympy's parse_latex (that
needs antlr). The translated string is evaluated by sympy only when it consists of numbers,
operators and a short list of known names: model output never reaches eval unchecked.
"""

import re
from functools import lru_cache

import sympy
from sympy.parsing.sympy_parser import (
    auto_number,
    factorial_notation,
    implicit_multiplication,
    parse_expr,
)

MAX_EXPRESSION_CHARS = 200  # longer answers are compared as strings only
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_boxed(text: str | None) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), or None when there is none or
    its braces never close."""
    if not text:
        return None
    starts = [m.end() for m in _BOX.finditer(text)]
    if not starts:
        return None
    end = group_end(text, starts[-1])
    return text[starts[-1] : end].strip() if end is not None else None


def group_end(text: str, start: int) -> int | None:
    """The index of the `}` closing the `{` just before `start`, or None if it never closes."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


_UNIT = re.compile(r"(?<=[\d}])\s*\\(?:text|mbox|mathrm)\{\s*[A-Za-z][A-Za-z\s.]*\}$")
_WRAPPER = re.compile(r"^\\(?:text|mbox|mathrm|textbf|mathbf)\{(.*)\}$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_LHS = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?=[^=])")


def normalise(answer: str) -> str:
    s = answer.strip()
    for old, new in (
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\left", ""),
        ("\\right", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\:", ""),
        ("\\ ", ""),
        ("$", ""),
        ("^\\circ", ""),
        ("^{\\circ}", ""),
        ("\\degree", ""),
        ("°", ""),
        ("\\%", ""),
        ("%", ""),
    ):
        s = s.replace(old, new)
    s = _UNIT.sub("", s.strip())
    while (m := _WRAPPER.match(s)) is not None:
        s = m.group(1).strip()
    s = s.rstrip(".").strip()
    # "x = 3" answers the question "what is x?": the right-hand side is compared.
    s = _LHS.sub("", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return re.sub(r"\s+", "", s)


def _split_top_level(s: str) -> list[str]:
    """Split on commas outside brackets: "(1,2),3" -> ["(1,2)", "3"]."""
    parts, depth, current = [], 0, ""
    for ch in s:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [*parts, current]


def _braced(s: str, i: int) -> tuple[str, int]:
    """The content of the brace group starting at s[i] == "{", and the index after it."""
    depth = 0
    for j in range(i, len(s)):
        depth += s[j] == "{"
        depth -= s[j] == "}"
        if depth == 0:
            return s[i + 1 : j], j + 1
    raise ValueError("unbalanced braces")


def _group(s: str, i: int) -> tuple[str, int]:
    """A command's argument at s[i]: a brace group, or one character (\\frac12, \\sqrt2)."""
    if s[i : i + 1] == "{":
        return _braced(s, i)
    if i >= len(s):
        raise ValueError("missing argument")
    return s[i], i + 1


def to_sympy_text(s: str) -> str:
    """A normalised LaTeX answer as sympy input: \\frac, \\sqrt, \\pi, \\cdot, ^ and braces."""
    out, i = "", 0
    while i < len(s):
        if s.startswith("\\frac", i):
            num, i = _group(s, i + 5)
            den, i = _group(s, i)
            out += f"(({to_sympy_text(num)})/({to_sympy_text(den)}))"
        elif s.startswith("\\sqrt", i):
            i += 5
            root = "2"
            if s[i : i + 1] == "[":
                end = s.index("]", i)
                root, i = to_sympy_text(s[i + 1 : end]), end + 1
            body, i = _group(s, i)
            out += f"(({to_sympy_text(body)})**(1/({root})))"
        elif s[i] == "\\":
            name = re.match(r"\\([A-Za-z]+)", s[i:])
            if name is None:
                raise ValueError(f"unknown LaTeX at {s[i : i + 10]!r}")
            word = name.group(1)
            out += {
                "pi": "pi",
                "cdot": "*",
                "times": "*",
                "div": "/",
                "infty": "oo",
                "ln": "log",
                "log": "log",
                "sin": "sin",
                "cos": "cos",
                "tan": "tan",
                "exp": "exp",
            }.get(word) or _unknown(word)
            out += " "
            i += len(word) + 1
        elif s[i] in "{}":
            out += "(" if s[i] == "{" else ")"
            i += 1
        else:
            out += "**" if s[i] == "^" else s[i]
            i += 1
    return out


def _unknown(word: str) -> str:
    raise ValueError(f"no sympy meaning for \\{word}")


_NAMES = {"sqrt", "pi", "oo", "log", "sin", "cos", "tan", "exp"}
_SAFE = re.compile(r"^[0-9A-Za-z+\-*/().\s]*$")
_BIG_POWER = re.compile(r"\*\*\s*\(*\s*\d{4,}")


@lru_cache(maxsize=4096)
def to_expression(s: str) -> sympy.Expr | None:
    """The sympy value of a normalised answer, or None when it is not a safe, simple expression."""
    if len(s) > MAX_EXPRESSION_CHARS:
        return None
    try:
        text = to_sympy_text(s)
    except ValueError:
        return None
    names = set(re.findall(r"[A-Za-z]+", text))
    # Only digits, operators, brackets and known or one-letter names reach parse_expr (which
    # evaluates its input); huge powers (9**9**9) would hang sympy, so they are refused too.
    if not _SAFE.match(text) or any(len(n) > 1 and n not in _NAMES for n in names):
        return None
    if _BIG_POWER.search(text) or text.count("**") > 6:
        return None
    try:
        local = {n: sympy.Symbol(n) for n in names if len(n) == 1}
        local.update(E=sympy.E, I=sympy.I)
        return parse_expr(
            text,
            local_dict=local,
            evaluate=True,
            transformations=(auto_number, factorial_notation, implicit_multiplication),
        )
    except Exception:  # noqa: BLE001 - anything sympy cannot read is simply not an expression
        return None


def _same_value(a: sympy.Expr, b: sympy.Expr) -> bool:
    try:
        if not a.free_symbols and not b.free_symbols:
            x, y = complex(a.evalf(30)), complex(b.evalf(30))
            return abs(x - y) <= 1e-9 * max(1.0, abs(y))
        return sympy.simplify(a - b) == 0
    except Exception:  # noqa: BLE001 - e.g. a comparison sympy cannot decide: not equal
        return False


def _one_equivalent(answer: str, gold: str) -> bool:
    if answer == gold:
        return True
    a, b = to_expression(answer), to_expression(gold)
    return a is not None and b is not None and _same_value(a, b)


def equivalent(answer: str, gold: str) -> bool:
    """Whether the extracted answer means the same as the gold answer (both LaTeX or plain)."""
    a, b = normalise(answer), normalise(gold)
    if not a:
        return False
    if a == b:
        return True
    parts_a, parts_b = _split_top_level(a), _split_top_level(b)
    if len(parts_a) != len(parts_b):
        return False
    if len(parts_a) == 1:
        return _one_equivalent(a, b)
    left = list(parts_b)  # a list of answers matches in any order, each gold part once
    for part in parts_a:
        match = next((g for g in left if _one_equivalent(part, g)), None)
        if match is None:
            return False
        left.remove(match)
    return True


def score(reply: str | None, gold: str) -> float:
    """1.0 when the reply's last \\boxed{} answer is equivalent to the gold answer, else 0.0."""
    boxed = extract_boxed(reply)
    return float(boxed is not None and equivalent(boxed, gold))
