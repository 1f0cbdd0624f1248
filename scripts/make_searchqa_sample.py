"""Build the searchqa sample (data/searchqa/) from Debian's dictd dictionaries.

    apt-get install -y dict-elements dict-foldoc
    python scripts/make_searchqa_sample.py [--dictd /usr/share/dictd] [--out data/searchqa]

Writes a wiki-18 style corpus (corpus.jsonl.gz: {"id", "contents": "\"Title\"\\ntext"}) of one
passage per chemical element and a few thousand FOLDOC entries, and Search-R1 style questions
(train.jsonl, test.jsonl: {"id", "question", "golden_answers", "data_source"}) whose answers are
read off the structured element entries and FOLDOC's acronym entries, so each is answerable from
one passage of the corpus. Deterministic: the same dictionaries give the same files.
"""

import argparse
import gzip
import hashlib
import json
import re
from pathlib import Path

CORPUS_SIZE = 3000  # passages in all
ACRONYM_QUESTIONS = 250
PASSAGE_WORDS = 150  # wiki-18 passages are ~100 words; FOLDOC entries are cut to about that
TEST_SHARE = 4  # one question in four goes to test.jsonl
LAST_ELEMENT = 109  # the dictionary's texts past 109 were copied from Wikipedia: left out
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _number(b64: str) -> int:
    n = 0
    for ch in b64:
        n = n * 64 + _B64.index(ch)
    return n


def read_dictd(dictd: Path, name: str, encoding: str) -> list[str]:
    """The entries of a dictd dictionary, in file order, each once (headwords may share one)."""
    data = gzip.open(dictd / f"{name}.dict.dz").read()  # dictzip is gzip-compatible
    spans = set()
    for line in (
        (dictd / f"{name}.index").read_text(encoding="utf-8", errors="replace").splitlines()
    ):
        head, offset, length = line.split("\t")[:3]
        if not head.startswith("00database"):
            spans.add((_number(offset), _number(length)))
    return [data[o : o + n].decode(encoding, errors="replace") for o, n in sorted(spans)]


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _passage(pid: str, title: str, text: str) -> dict:
    words = text.split()
    return {"id": pid, "contents": f'"{title}"\n' + " ".join(words[:PASSAGE_WORDS])}


def elements(entries: list[str]) -> tuple[list[dict], list[dict]]:
    """One passage per element 1..109 and questions on symbol, number, weight and discovery."""
    by_number: dict[int, dict] = {}
    aliases: dict[str, list[str]] = {}  # "aluminium: Same as {aluminum}"
    for entry in entries:
        same = re.match(r"(\w+)\s+Same as \{(\w+)\}", entry.strip())
        if same:
            aliases.setdefault(same.group(2).capitalize(), []).append(same.group(1).capitalize())
    for entry in entries:
        lines = entry.strip().splitlines()
        fields = dict(re.findall(r"^(Symbol|Atomic number|Atomic weight): (.+)$", entry, re.M))
        if len(fields) < 3 or not fields["Atomic number"].isdigit():
            continue
        number = int(fields["Atomic number"])
        name = lines[0].strip().capitalize()
        if number > LAST_ELEMENT or name.lower().startswith("unn"):  # placeholder names
            continue
        if number in by_number:  # aluminium / aluminum: one element, two spellings
            by_number[number]["names"].append(name)
            continue
        body = " ".join(line for line in lines[1:] if not re.match(r"(Symbol|Atomic \w+):", line))
        by_number[number] = {
            "names": [name],
            "symbol": fields["Symbol"].strip(),
            "weight": fields["Atomic weight"].strip(),
            "body": body,
        }
    passages, questions = [], []
    for number, el in sorted(by_number.items()):
        name, symbol, weight = el["names"][0], el["symbol"], el["weight"]
        names = el["names"] + aliases.get(name, [])
        text = (
            f"{name} (symbol {symbol}) is the chemical element with atomic number {number}. "
            f"Atomic weight: {weight}. {el['body']}"
        )
        passages.append(_passage(f"element-{number}", name, text))
        asked = [
            (f"What is the atomic number of {name}?", [str(number)]),
            (f"What is the chemical symbol of {name}?", [symbol]),
            (f"Which chemical element has the symbol {symbol}?", names),
            (f"Which chemical element has atomic number {number}?", names),
        ]
        if re.fullmatch(r"\d+\.\d+", weight):  # "(266)" style estimates are not asked
            asked.append((f"What is the atomic weight of {name}?", [weight]))
        found = re.search(r"[Dd]iscovered\b[^.]*?\bin (\d{4})", el["body"])
        if found:
            asked.append((f"In what year was {name} discovered?", [found.group(1)]))
        for question, gold in asked:
            questions.append(
                {"question": question, "golden_answers": gold, "data_source": "elements"}
            )
    return passages, questions


def _clean_foldoc(body: str) -> str:
    text = body.replace("{", "").replace("}", "")
    text = re.sub(r"\(\d{4}-\d{2}-\d{2}\)\s*$", "", text.strip())  # the entry's edit date
    return " ".join(text.split())


def foldoc(entries: list[str]) -> tuple[list[dict], list[dict]]:
    """A passage per FOLDOC entry, and "what does X stand for" for unambiguous acronyms."""
    passages, expansions = [], {}
    for entry in entries:
        head, _, body = entry.strip().partition("\n\n")
        headings = [h.strip() for h in head.splitlines() if h.strip()]
        text = _clean_foldoc(body)
        if not headings or not text:
            continue
        pid = "foldoc-" + _key(entry)[:12]  # headings repeat across entries
        passages.append((pid, headings[0], text))
        if len(headings) == 2 and re.fullmatch(r"[A-Z][A-Z0-9]{1,7}", headings[1]):
            full, acronym = headings
            words = full.split()
            if (
                2 <= len(words) <= 8
                and f"({acronym})" in text
                and "{" not in full
                and full[0].upper() == acronym[0]
            ):
                expansions.setdefault(acronym, []).append((full, pid))
    questions, cited = [], set()
    unambiguous = sorted((a, e[0]) for a, e in expansions.items() if len(e) == 1)
    for acronym, (full, pid) in sorted(unambiguous, key=lambda x: _key(x[0]))[:ACRONYM_QUESTIONS]:
        questions.append(
            {
                "question": f"What does the acronym {acronym} stand for in computing?",
                "golden_answers": [full],
                "data_source": "foldoc",
            }
        )
        cited.add(pid)
    # The entries questions cite, then others in a fixed pseudo-random order, up to the size.
    rest = sorted((p for p in passages if p[0] not in cited), key=lambda p: _key(p[0]))
    chosen = [p for p in passages if p[0] in cited] + rest
    return [_passage(pid, title, text) for pid, title, text in chosen], questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dictd", type=Path, default=Path("/usr/share/dictd"))
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent.parent / "data" / "searchqa"
    )
    args = parser.parse_args()
    element_passages, element_questions = elements(read_dictd(args.dictd, "elements", "latin-1"))
    foldoc_passages, foldoc_questions = foldoc(read_dictd(args.dictd, "foldoc", "utf-8"))
    corpus = element_passages + foldoc_passages[: CORPUS_SIZE - len(element_passages)]
    args.out.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same input gives byte-identical output
    with (
        open(args.out / "corpus.jsonl.gz", "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
    ):
        for passage in corpus:
            gz.write((json.dumps(passage, ensure_ascii=False) + "\n").encode())
    splits = {"train": [], "test": []}
    for q in element_questions + foldoc_questions:
        key = _key(q["question"])
        q = {"id": f"{q['data_source']}-{key[:10]}", **q}
        splits["test" if int(key, 16) % TEST_SHARE == 0 else "train"].append(q)
    for split, rows in splits.items():
        with open(args.out / f"{split}.jsonl", "w") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    print(
        f"{len(corpus)} passages, {len(splits['train'])} train and {len(splits['test'])} test "
        f"questions in {args.out}"
    )


if __name__ == "__main__":
    main()
