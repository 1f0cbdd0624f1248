"""mkdocs hook (mkdocs.yml, `hooks`): read the pages' lists as GitHub does.

The pages under docs/ are read on GitHub too, and are written for it: a list may follow its
paragraph's last line directly, and a nested list is indented by its parent's marker width (2
or 3 spaces). Python-Markdown, which mkdocs renders with, wants a blank line before a list and
4 spaces per level; without them a list is printed as one paragraph of dashes. This rewrites
each page's Markdown into that form before it is rendered. The file is unchanged on disk.
"""

import re

LIST_ITEM = re.compile(r"^( *)(?:[-*+]|\d+[.)]) +\S")
FENCE = re.compile(r"^ *(```|~~~)")
PYTHON_MARKDOWN_INDENT = 4


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def github_lists(markdown: str) -> str:
    out: list[str] = []
    in_fence = False
    # The indent (as written) of each open list level, outermost first; empty outside a list.
    levels: list[int] = []
    after_blank = True
    blank_since_item = False  # a paragraph of its own inside the last item
    for line in markdown.split("\n"):
        if FENCE.match(line):
            in_fence = not in_fence
            out.append(line)
            after_blank = False
            continue
        if in_fence:
            out.append(line)
            continue
        if not line.strip():
            out.append(line)
            after_blank = blank_since_item = True
            continue
        written = indent_of(line)
        item = LIST_ITEM.match(line)
        if not item and written == 0 and (after_blank or line.startswith(("#", "|"))):
            levels = []  # a paragraph, heading or table of its own ends the list
        if item:
            while levels and written < levels[-1]:
                levels.pop()
            after_text = out and out[-1].strip() and not LIST_ITEM.match(out[-1])
            if not levels or written > levels[-1]:
                # A new list, or one nested in the item above: it needs a blank line before it
                # unless it follows its parent item's line directly.
                if out and out[-1].strip() and not (levels and not after_text):
                    out.append("")
                levels.append(written)
            elif after_text and blank_since_item:
                out.append("")  # the next item after a paragraph of the one before
            blank_since_item = False
        if levels and written:
            # Inside a list: each level the author indented is one of Python-Markdown's.
            depth = sum(1 for level in levels if level < written)
            line = " " * (PYTHON_MARKDOWN_INDENT * depth) + line.lstrip(" ")
        out.append(line)
        after_blank = False
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    return github_lists(markdown)
