"""Side-by-side diffs of harness code, as data: hunks of rows (old line | new line), the
unchanged stretches between hunks folded to a count. The harness page renders the rows into a
two-column table and /api/harnesses/{id} returns the same hunks.

A row's tag is difflib's: equal, replace (the line changed; `old_parts`/`new_parts` mark the
characters that changed), delete (only on the old side) or insert (only on the new side).
"""

import re
from difflib import SequenceMatcher
from typing import Any

CONTEXT = 3  # unchanged lines shown around each change
# Below this similarity a changed line is shown as rewritten outright: marking the few characters
# two unrelated lines happen to share would be noise.
INTRALINE_MIN_RATIO = 0.4
TOKEN = re.compile(r"\w+|\s+|[^\w\s]")  # words, runs of blanks, single punctuation marks

Row = dict[str, Any]


def _parts(text: str, spans: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """`text` cut into pieces, those inside `spans` marked changed."""
    parts, pos = [], 0
    for start, end in spans:
        if start > pos:
            parts.append({"text": text[pos:start], "changed": False})
        if end > start:
            parts.append({"text": text[start:end], "changed": True})
        pos = end
    if pos < len(text):
        parts.append({"text": text[pos:], "changed": False})
    return parts


def _spans(tokens: list[str], ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Token index ranges as character ranges of the joined tokens."""
    starts = [0]
    for token in tokens:
        starts.append(starts[-1] + len(token))
    return [(starts[a], starts[b]) for a, b in ranges]


def intraline(old: str, new: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The two versions of a changed line, each cut into changed and unchanged pieces.

    Compared word by word, not character by character: "direct" -> "program" marks the word,
    not the letters the two happen to share.
    """
    old_tokens, new_tokens = TOKEN.findall(old), TOKEN.findall(new)
    matcher = SequenceMatcher(None, old_tokens, new_tokens, autojunk=False)
    if matcher.ratio() < INTRALINE_MIN_RATIO:
        return _parts(old, [(0, len(old))]), _parts(new, [(0, len(new))])
    opcodes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    return (
        _parts(old, _spans(old_tokens, [(i1, i2) for _, i1, i2, _, _ in opcodes])),
        _parts(new, _spans(new_tokens, [(j1, j2) for _, _, _, j1, j2 in opcodes])),
    )


def _rows(opcode: tuple[str, int, int, int, int], old: list[str], new: list[str]) -> list[Row]:
    """The table rows of one difflib opcode. A replaced block pairs its lines in order; the
    longer side's extra lines become deletions or insertions."""
    tag, i1, i2, j1, j2 = opcode
    rows = []
    for n in range(max(i2 - i1, j2 - j1)):
        i, j = i1 + n, j1 + n
        has_old, has_new = i < i2, j < j2
        if tag == "equal":
            row_tag = "equal"
        elif has_old and has_new:
            row_tag = "replace"
        else:
            row_tag = "delete" if has_old else "insert"
        row = {
            "tag": row_tag,
            "old_no": i + 1 if has_old else None,
            "old": old[i] if has_old else None,
            "new_no": j + 1 if has_new else None,
            "new": new[j] if has_new else None,
        }
        if row_tag == "replace":
            row["old_parts"], row["new_parts"] = intraline(old[i], new[j])
        rows.append(row)
    return rows


def side_by_side(old_code: str, new_code: str, context: int | None = CONTEXT) -> dict[str, Any]:
    """The diff of two versions of a file.

    Returns {"identical", "added", "removed", "hunks", "folded_after"}: each hunk has
    "folded_before" (unchanged lines hidden above it), its first line numbers and its rows;
    `context` None shows every line in one hunk.
    """
    old, new = old_code.splitlines(), new_code.splitlines()
    matcher = SequenceMatcher(None, old, new, autojunk=False)
    opcodes = matcher.get_opcodes()
    changes = [op for op in opcodes if op[0] != "equal"]
    added = sum(j2 - j1 for _, _, _, j1, j2 in changes)
    removed = sum(i2 - i1 for _, i1, i2, _, _ in changes)
    if not changes:
        groups = [opcodes] if context is None and old else []
    elif context is None:
        groups = [opcodes]
    else:
        groups = list(matcher.get_grouped_opcodes(context))
    hunks, shown_to = [], 0  # old lines up to shown_to are shown or folded already
    for group in groups:
        _, i1, _, j1, _ = group[0]
        hunks.append(
            {
                "folded_before": i1 - shown_to,
                "old_start": i1 + 1,
                "new_start": j1 + 1,
                "rows": [row for op in group for row in _rows(op, old, new)],
            }
        )
        shown_to = group[-1][2]
    return {
        "identical": not changes,
        "added": added,
        "removed": removed,
        "hunks": hunks,
        "folded_after": len(old) - shown_to if hunks else 0,
    }
