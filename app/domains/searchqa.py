"""searchqa: open-domain question answering with a `search(query_list, topk)` tool.

Questions come in the formats Search-R1 and FlashRAG publish: JSONL or parquet rows with
`question`, `golden_answers` (a list), `data_source` and usually `id` (Search-R1's processed
parquet, as the release uses it, has the question in `extra_info.question` or the prompt, and
the answers in `reward_model.ground_truth.target`); or, where the `datasets` package is
installed and the hub reachable, a hub id (`hf:nq:test`, `hf:<repo>:<config>:<split>`). Each
task's `data_source` names its benchmark (nq, triviaqa, popqa, hotpotqa, 2wikimultihopqa,
musique, bamboogle; Search-R1's "searchR1_" prefix dropped): test scores are also given per
benchmark and as their mean, as the paper's table does (app/read/benchmarks.py).
Passages come from a wiki-18 style JSONL corpus (see app/domains/retrieval.py). Without
configuration the shipped sample in data/searchqa/ is used (built from Debian's dictd
dictionaries by scripts/make_searchqa_sample.py).

Environment:
- WHALE_SEARCHQA_TRAIN: question files (comma-separated) for the train split, which the
  harness split is drawn from (the release's NQ + HotpotQA train file, 18,946 questions)
- WHALE_SEARCHQA_TEST: question files for the test split
- WHALE_SEARCHQA_VAL: validation rows of the test files (the release's test_100.parquet, 100 a
  benchmark): they form the `val` split and leave the test split, as the release's
  build_final_test_excluding_val.py leaves them out of the final test (matched by benchmark,
  extra_info.index, question and gold answers)
- WHALE_SEARCHQA_CORPUS: the passage corpus
- WHALE_SEARCHQA_HARNESS_SIZE: the harness split's size (256)
- WHALE_SEARCHQA_HARNESS_BASE: question files whose rows start the harness split (the release's
  128 base NQ rows, mh_nq_single_128.parquet); each must be a train question
- WHALE_SEARCHQA_HARNESS_DISJOINT: 1 to take the harness questions out of the train split (the
  release leaves them in)
- WHALE_SEARCHQA_RETRIEVER: bm25 (default) or dense, with WHALE_SEARCHQA_DENSE_INDEX (a FAISS
  index whose row i is corpus line i) and WHALE_SEARCHQA_DENSE_MODEL (default intfloat/e5-base-v2)
- WHALE_SEARCHQA_PASSAGE_TOKENIZER: the tokenizer `search(..., max_doc_tokens=N)` counts a
  passage's tokens with (the release: the policy's, Qwen/Qwen3.5-2B); words when unset
- WHALE_SEARCHQA_JUDGE_URL, WHALE_SEARCHQA_JUDGE_MODEL, WHALE_SEARCHQA_JUDGE_KEY_ENV: an LLM judge
  over an OpenAI-compatible endpoint, asked when exact match fails (off unless the URL is set)

Score (`lenient`, the default): 1 when the answer (the text of its last <answer>...</answer>,
any tag case, else all of it) equals a golden answer after SQuAD normalisation, with the LLM
judge asked where exact match fails; `f1` is the secondary token-F1 metric. `paper`: the
release's exact match (app/domains/paper_scoring.py): only a closed, lower-case tag counts, 0
without one, no judge.
"""

import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from app import ROOT
from app.config import Settings
from app.domains import SKILLS, SPLITS, Task
from app.domains.paper_scoring import search_qa_normalize as normalize
from app.domains.paper_scoring import search_qa_score
from app.domains.retrieval import BM25Index, DenseIndex, PassageCutter, jsonl_rows, open_text

SAMPLE = ROOT / "data" / "searchqa"
# The release's harness split (domains/search_qa/scripts/data_process/build_meta_harness_nq_256.py
# at krafton-ai/WHALE 7d5a422a): 256 NQ train questions, the base rows first, the rest drawn
# with pandas' sample(n, random_state=42).
HARNESS_SIZE = 256
HARNESS_SEED = 42
HARNESS_SOURCE = "nq"
# FlashRAG's collection holds the seven test sets the paper reports, under these configs.
FLASHRAG = "RUC-NLPIR/FlashRAG_datasets"
HF_SHORT = {
    name: (FLASHRAG, name)
    for name in ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
}


class QuestionsError(ValueError):
    pass


# ---- loading questions ----------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    id: str
    public: dict  # question, data_source
    golds: list[str]
    index: int | None = None  # Search-R1's extra_info.index: with the question, the release's key

    @property
    def key(self) -> tuple[str, int | None, str]:
        """What the release matches rows by: benchmark, extra_info.index and question."""
        return (self.public["data_source"], self.index, self.public["question"])


def benchmark_name(data_source: str) -> str:
    """A data_source as the paper names the benchmark: Search-R1's "searchR1_nq" is "nq"."""
    return data_source.strip().removeprefix("searchR1_").lower()


def _question_text(row: dict) -> object:
    """`question`, else Search-R1's extra_info.question, else the text after the last
    "Question:" of the prompt's user message (Search-R1's template ends with the question)."""
    if row.get("question") is not None:
        return row["question"]
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    if extra.get("question"):
        return extra["question"]
    prompt = row.get("prompt")
    for message in prompt if isinstance(prompt, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") == "user" and isinstance(content, str) and "Question:" in content:
            return content[content.rfind("Question:") + len("Question:") :]
    return None


def question_row(row: object, where: str, source: str, number: int = 0) -> Question:
    """One question row as a Question; `where` names it in errors, `number` (its place in its
    source) makes an id when the row has neither `id` nor extra_info.index."""
    if not isinstance(row, dict):
        raise QuestionsError(f"{where}: a question row must be an object, got {type(row).__name__}")
    question = _question_text(row)
    if not isinstance(question, str) or not question.strip():
        raise QuestionsError(f"{where}: 'question' must be a non-empty string")
    golds = row.get("golden_answers")
    if golds is None:  # Search-R1's processed parquet keeps them under reward_model
        golds = ((row.get("reward_model") or {}).get("ground_truth") or {}).get("target")
    if isinstance(golds, str):
        golds = [golds]
    golds = list(golds) if golds is not None and not isinstance(golds, dict) else None
    if not golds or not all(isinstance(g, str) and g.strip() for g in golds):
        raise QuestionsError(f"{where}: 'golden_answers' must be a non-empty list of strings")
    data_source = benchmark_name(str(row.get("data_source") or source))
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    try:
        index = int(extra["index"]) if extra.get("index") is not None else None
    except (TypeError, ValueError):
        index = None
    qid = str(row.get("id") if row.get("id") is not None else "")
    if not qid:
        qid = f"{data_source}-{index if index is not None else number}"
    elif not qid.startswith(data_source):  # FlashRAG ids ("test_0") repeat across sets
        qid = f"{data_source}-{qid}"
    public = {"question": question.strip(), "data_source": data_source}
    return Question(qid, public, golds, index)


def _rows(spec: str) -> Iterable[tuple[str, object]]:
    """(where, row) for each row of a question source: a .jsonl(.gz), .json, .parquet or hf: id."""
    if spec.startswith("hf:"):
        yield from _hub_rows(spec)
        return
    path = Path(spec).expanduser()
    if not path.is_file():
        raise QuestionsError(f"no question file {path}")
    name = path.name.removesuffix(".gz")
    if name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise QuestionsError(
                f"{path}: reading parquet needs pyarrow (pip install 'whale-workbench[parquet]'), "
                "or convert the file to JSONL"
            ) from None
        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"{path} row {i}", row
    elif name.endswith(".json"):
        with open_text(path) as f:
            try:
                rows = json.load(f)
            except json.JSONDecodeError as exc:
                raise QuestionsError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(rows, list):
            raise QuestionsError(f"{path}: a .json question file must hold a list of rows")
        for i, row in enumerate(rows, 1):
            yield f"{path} row {i}", row
    elif name.endswith(".jsonl"):
        with open_text(path) as f:
            yield from jsonl_rows(f, path, QuestionsError)
    else:
        raise QuestionsError(f"{path}: unknown question format (use .jsonl, .json or .parquet)")


def _hub_rows(spec: str) -> Iterable[tuple[str, object]]:
    """hf:<short name>:<split> (nq, triviaqa, ... from FlashRAG) or hf:<repo>[:<config>]:<split>."""
    parts = spec.removeprefix("hf:").split(":")
    if len(parts) == 2 and parts[0] in HF_SHORT:
        (repo, config), split = HF_SHORT[parts[0]], parts[1]
    elif len(parts) in (2, 3):
        repo, config, split = parts[0], (parts[1] if len(parts) == 3 else None), parts[-1]
    else:
        raise QuestionsError(f"{spec}: write hf:<name>:<split> or hf:<repo>[:<config>]:<split>")
    try:
        import datasets
    except ImportError:
        raise QuestionsError(
            f"{spec}: loading from the hub needs the datasets package "
            "(pip install datasets); or download the files and give their "
            "paths"
        ) from None
    try:
        rows = datasets.load_dataset(repo, config, split=split)
    except Exception as exc:  # noqa: BLE001 - offline, unknown repo or split: say which and why
        raise QuestionsError(
            f"{spec}: could not load {repo} from the hub with the datasets "
            f"package: {type(exc).__name__}: {exc}"
        ) from None
    for i, row in enumerate(rows, 1):
        yield f"{spec} row {i}", row


def load_questions(specs: str) -> list[Question]:
    """Every question of a comma-separated list of sources, ids made unique per source."""
    out, seen = [], set()
    for spec in (s.strip() for s in specs.split(",") if s.strip()):
        source = Path(spec).name.split(".")[0] if not spec.startswith("hf:") else spec
        for i, (where, row) in enumerate(_rows(spec), 1):
            q = question_row(row, where, source, i)
            qid = q.id
            while qid in seen:  # two files, one id scheme: keep both questions
                qid += "+"
            seen.add(qid)
            out.append(Question(qid, q.public, q.golds, q.index))
    return out


def draw_harness(
    pool: list[Question],
    size: int,
    base: list[Question] = (),
    seed: int = HARNESS_SEED,
    source: str = HARNESS_SOURCE,
) -> list[Question]:
    """The release's harness draw: the base rows, then `size - len(base)` questions of
    `source` (nq) drawn from the pool as pandas' DataFrame.sample(n, random_state=seed) draws
    rows (numpy's RandomState(seed).permutation, its first n), leaving out the base rows' keys
    and questions. A pool without `source` questions (the shipped sample) is drawn from whole."""
    import numpy as np

    in_pool = {q.key: q for q in pool}
    missing = [q for q in base if q.key not in in_pool]
    if missing:
        raise QuestionsError(
            f"{len(missing)} harness base question(s) are not train questions, e.g. "
            f"{missing[0].public['question']!r} ({missing[0].public['data_source']}, index "
            f"{missing[0].index})"
        )
    if len(base) > size:
        raise QuestionsError(f"{len(base)} harness base questions, more than the size {size}")
    chosen = [in_pool[q.key] for q in base]  # the train rows themselves: their ids
    questions = {q.public["question"] for q in base}
    keys = {q.key for q in base}
    candidates = [q for q in pool if q.public["data_source"] == source] or pool
    candidates = [
        q for q in candidates if q.key not in keys and q.public["question"] not in questions
    ]
    order = np.random.RandomState(seed).permutation(len(candidates))[: size - len(base)]
    return chosen + [candidates[i] for i in order]


def row_key(q: Question) -> tuple:
    """What the release matches a validation row to a test row by (build_final_test_excluding_
    val.py, _row_key): benchmark, extra_info.index, question and the gold answers."""
    return (*q.key, tuple(q.golds))


def without_validation(test: list[Question], val: list[Question]) -> list[Question]:
    """The release's final test file: the test questions less the validation rows (its
    test_100: 100 per benchmark), so no question a run was validated on is reported."""
    held = {row_key(q) for q in val}
    kept = [q for q in test if row_key(q) not in held]
    if val and len(kept) == len(test):  # the release's --require-excluded
        raise QuestionsError(
            f"none of the {len(val)} validation questions is in the test file(s): "
            "WHALE_SEARCHQA_VAL must hold rows of WHALE_SEARCHQA_TEST (the release's test_100)"
        )
    return kept


def make_splits(
    train: list[Question],
    test: list[Question],
    harness_size: int,
    base: list[Question] = (),
    disjoint: bool = False,
    val: list[Question] = (),
) -> dict[str, list[Task]]:
    """test from the test files, less the validation rows `val` (which form the `val` split,
    when given); harness drawn from the train questions as the release draws it (at most a
    quarter of them, for small files); train = the train questions, without the harness ones
    when `disjoint` (the release keeps them). A train question also asked in test or val is
    dropped from train and harness, so no test question is trained or searched on."""
    test = without_validation(test, val)
    tested = {q.public["question"].lower() for q in [*test, *val]}
    pool = [q for q in train if q.public["question"].lower() not in tested]
    size = max(len(base), min(harness_size, len(pool) // 4))
    harness = draw_harness(pool, size, base)
    held = {q.id for q in harness}

    def tasks(rows):
        return [Task(q.id, q.public, json.dumps(q.golds)) for q in rows]

    splits = {
        "train": tasks(q for q in pool if not (disjoint and q.id in held)),
        "harness": tasks(harness),
        "test": tasks(test),
    }
    return splits | ({"val": tasks(val)} if val else {})


# ---- verifying answers ----------------------------------------------------------------------

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)


def extract_answer(text: str | None) -> str:
    """The text of the last <answer>...</answer>, or the whole text when there is none."""
    if not text:
        return ""
    found = _ANSWER.findall(text)
    return found[-1] if found else text


def exact_match(answer: str | None, golds: list[str]) -> float:
    predicted = normalize(extract_answer(answer))
    return float(bool(predicted) and any(predicted == normalize(g) for g in golds))


def f1(answer: str | None, golds: list[str]) -> float:
    """Token F1 of the extracted answer, the best over the golden answers."""
    predicted = normalize(extract_answer(answer)).split()
    best = 0.0
    for gold in golds:
        truth = normalize(gold).split()
        common = sum((Counter(predicted) & Counter(truth)).values())
        if common:
            precision, recall = common / len(predicted), common / len(truth)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


class LLMJudge:
    """Asks a chat model over an OpenAI-compatible endpoint whether an answer means a golden one
    (the paper's optional judge). Used only where exact match fails; any failure scores 0."""

    PROMPT = (
        "Question: {question}\nGold answers: {golds}\nPredicted answer: {answer}\n"
        "Does the predicted answer mean the same as one of the gold answers? "
        "Reply with only yes or no."
    )

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout: float = 30.0):
        self.url = url.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout

    def __call__(self, question: str, answer: str, golds: list[str]) -> float:
        prompt = self.PROMPT.format(question=question, golds="; ".join(golds), answer=answer)
        try:
            reply = httpx.post(
                self.url,
                headers=self.headers,
                timeout=self.timeout,
                json={
                    "model": self.model,
                    "temperature": 0.0,
                    "max_tokens": 4,
                    "messages": [{"role": "user", "content": prompt}],
                },
            )
            reply.raise_for_status()
            verdict = reply.json()["choices"][0]["message"]["content"] or ""
        except (httpx.HTTPError, KeyError, IndexError, ValueError):
            return 0.0
        return float(verdict.strip().lower().startswith("yes"))


def judge_from_env() -> LLMJudge | None:
    url = os.environ.get("WHALE_SEARCHQA_JUDGE_URL")
    if not url:
        return None
    model = os.environ.get("WHALE_SEARCHQA_JUDGE_MODEL")
    if not model:
        raise ValueError("WHALE_SEARCHQA_JUDGE_URL needs WHALE_SEARCHQA_JUDGE_MODEL")
    return LLMJudge(
        url, model, os.environ.get(os.environ.get("WHALE_SEARCHQA_JUDGE_KEY_ENV", "OPENAI_API_KEY"))
    )


# ---- the domain -----------------------------------------------------------------------------


class SearchQA:
    name = "searchqa"
    # Retrieval runs server-side through the search tool; a harness needs no processes of its own.
    forbidden_modules = frozenset({"subprocess", "multiprocessing", "ctypes"})
    seed_harness = ROOT / "harness_archive" / "seeds" / "searchqa" / "seed.py"
    skill = SKILLS / "searchqa.md"
    scorings = ("lenient", "paper")

    def __init__(self):
        env = os.environ.get
        train = load_questions(env("WHALE_SEARCHQA_TRAIN") or str(SAMPLE / "train.jsonl"))
        test = load_questions(env("WHALE_SEARCHQA_TEST") or str(SAMPLE / "test.jsonl"))
        base, val = env("WHALE_SEARCHQA_HARNESS_BASE"), env("WHALE_SEARCHQA_VAL")
        self._splits = make_splits(
            train,
            test,
            int(env("WHALE_SEARCHQA_HARNESS_SIZE") or HARNESS_SIZE),
            load_questions(base) if base else [],
            disjoint=env("WHALE_SEARCHQA_HARNESS_DISJOINT", "") in ("1", "true", "yes"),
            val=load_questions(val) if val else [],
        )
        corpus = Path(env("WHALE_SEARCHQA_CORPUS") or SAMPLE / "corpus.jsonl.gz").expanduser()
        if not corpus.is_file():
            raise FileNotFoundError(f"no searchqa corpus at {corpus}")
        self.index = BM25Index.open(
            corpus, Settings().home / "indexes"
        )  # built once, with progress
        retriever = env("WHALE_SEARCHQA_RETRIEVER") or "bm25"
        if retriever == "dense":
            faiss_index = env("WHALE_SEARCHQA_DENSE_INDEX")
            if not faiss_index:
                raise ValueError("WHALE_SEARCHQA_RETRIEVER=dense needs WHALE_SEARCHQA_DENSE_INDEX")
            self.retriever = DenseIndex(
                self.index,
                Path(faiss_index).expanduser(),
                env("WHALE_SEARCHQA_DENSE_MODEL") or "intfloat/e5-base-v2",
            )
        elif retriever == "bm25":
            self.retriever = self.index
        else:
            raise ValueError(f"WHALE_SEARCHQA_RETRIEVER={retriever!r}: use bm25 or dense")
        self.cutter = PassageCutter(env("WHALE_SEARCHQA_PASSAGE_TOKENIZER") or None)
        self.tools = {"search": self.search}
        self.judge = judge_from_env()

    def search(
        self, query_list: list[str], topk: int = 3, max_doc_tokens: int | None = None
    ) -> list[list[dict]]:
        """The `search` tool: for each query its topk passages, best first, each cut to its
        first max_doc_tokens tokens (title line included) when that is given, as the release's
        retrieval server cuts them (the paper's h0 asks for 1 passage of 200 tokens)."""
        found = self.retriever.search(query_list, topk)
        if max_doc_tokens is None:
            return found
        if isinstance(max_doc_tokens, bool) or not isinstance(max_doc_tokens, int):
            raise ValueError(f"max_doc_tokens must be a positive integer, got {max_doc_tokens!r}")
        if max_doc_tokens < 1:
            raise ValueError(f"max_doc_tokens must be a positive integer, got {max_doc_tokens}")
        return [[self.cutter.cut(p, max_doc_tokens) for p in passages] for passages in found]

    def tasks(self, split: str) -> list[Task]:
        if split not in self._splits:
            known = ", ".join([*SPLITS, *(["val"] if "val" in self._splits else [])])
            raise ValueError(f"unknown split {split!r}; known: {known}")
        return self._splits[split]

    def score(self, answer: str | None, task: Task, scoring: str = "lenient") -> float:
        golds = json.loads(task.gold)
        if scoring == "paper":
            return search_qa_score(answer, golds)
        matched = exact_match(answer, golds)
        if matched or self.judge is None or not normalize(extract_answer(answer)):
            return matched
        return self.judge(task.public.get("question", ""), extract_answer(answer).strip(), golds)
