"""The release's verifiers for search QA and math, rule for rule: the `paper` scoring mode.

The workbench's own verifiers (`lenient`, the default) accept more than the paper's release
does, so rewards, RFT acceptance and mean@k under them are not the paper's numbers. These
functions score the answer a harness returns the way the release (krafton-ai/WHALE) scores the
last assistant message of a trajectory; the seed harnesses return that message as it is. The
chess rules are the episode's (app/domains/chess_puzzles.py). The edge cases, each with the
release's verdict, are in tests/domains/test_paper_scoring.py.
"""

import re
import string

from app.domains.math_answers import group_end

# --- search QA: domains/search_qa/environments/search_r1/env.py (correct_answer) ------------


def search_qa_answer(text: str | None) -> str | None:
    """The text between the last `</answer>` and the nearest `<answer>` before it, stripped;
    None without a closed pair. The tags are case-sensitive."""
    text = text or ""
    close = text.rfind("</answer>")
    if close < 0:
        return None
    start = text.rfind("<answer>", 0, close)
    if start < 0:
        return None
    return text[start + len("<answer>") : close].strip()


def search_qa_normalize(text: str) -> str:
    """verl's search_r1_like_qa_em.normalize_answer: lowercase, ASCII punctuation removed,
    whole-word articles removed, whitespace collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def search_qa_score(text: str | None, golds: list[str]) -> float:
    """1.0 when the extracted answer equals a gold answer after normalisation (exact match, no
    F1); 0.0 without an answer tag. The release's launchers score this way (LLM_JUDGE=0)."""
    answer = search_qa_answer(text)
    if answer is None:
        return 0.0
    predicted = search_qa_normalize(answer)
    return float(any(search_qa_normalize(str(g)) == predicted for g in golds))


# --- math: verl/utils/reward_score/math_dapo.py, strict_box_verify=True, as called by -------
# --- domains/math_reasoning/environments/retool/grpo_binary_reward.py (+1/-1 -> 1/0) ---------


def last_boxed(text: str) -> str | None:
    """The last `\\boxed{...}` of the text with its braces balanced, or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    end = group_end(text, start + len("\\boxed{"))
    return text[start : end + 1] if end is not None else None


def math_score(text: str | None, gold: str) -> float:
    """1.0 when the last box in the reply's last 100 characters holds exactly the gold answer,
    compared as raw strings: no normalisation of either side (`\\boxed{ 42 }`, `42.0`,
    `\\frac12` for `0.5` all score 0)."""
    tail = (text or "")[-300:][-100:]  # compute_score keeps 300, is_correct_strict_box 100
    boxed = last_boxed(tail)
    if boxed is None:
        return 0.0
    return float(boxed[len("\\boxed{") : -1] == gold)
