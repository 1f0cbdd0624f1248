import gzip
import json
import os
from pathlib import Path

import pytest
from sqlmodel import col, select

from app.db import open_engine, read_session
from app.db.schema import Rollout, Step
from app.domains import SPLITS, Task, get_domain
from app.domains.retrieval import (
    BM25Index,
    CorpusError,
    DenseIndex,
    RetrieverUnavailable,
    read_corpus,
)
from app.domains.searchqa import (
    SAMPLE,
    LLMJudge,
    QuestionsError,
    SearchQA,
    exact_match,
    f1,
    load_questions,
)
from tests.conftest import REPO, whale_eval_json
from tests.openai_stub import openai_stub


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh WHALE_HOME (where indexes are built) and the shipped sample as the data."""
    for var in [v for v in os.environ if v.startswith("WHALE_SEARCHQA_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("WHALE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def sample_index(tmp_path_factory) -> BM25Index:
    return BM25Index.open(
        SAMPLE / "corpus.jsonl.gz", tmp_path_factory.mktemp("indexes"), quiet=True
    )


# ---- loaders --------------------------------------------------------------------------------


def test_shipped_sample_makes_fixed_disjoint_splits(home):
    a, b = SearchQA(), SearchQA()
    questions = {}
    for split in SPLITS:
        tasks = a.tasks(split)
        assert len(tasks) >= 100
        assert [t.id for t in tasks] == [t.id for t in b.tasks(split)]
        for t in tasks:
            golds = json.loads(t.gold)
            assert golds and all(isinstance(g, str) for g in golds)
            assert set(t.public) == {"question", "data_source"}
            assert t.public["data_source"] in {"elements", "foldoc"}
        questions[split] = {t.public["question"] for t in tasks}
    assert not questions["train"] & questions["test"]
    assert not questions["harness"] & questions["test"]
    assert not questions["train"] & questions["harness"]
    assert len({t.id for s in SPLITS for t in a.tasks(s)}) == sum(len(a.tasks(s)) for s in SPLITS)


def test_shipped_corpus_is_wiki18_format():
    passages = list(read_corpus(SAMPLE / "corpus.jsonl.gz"))
    assert 2000 <= len(passages) <= 5000
    assert len({pid for pid, _, _ in passages}) == len(passages)
    by_id = {pid: (title, text) for pid, title, text in passages}
    title, text = by_id["element-10"]
    assert title == "Neon" and "atomic number 10" in text and not text.startswith('"')


def _write_jsonl(path, rows, gz=False):
    data = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


ROWS = [
    {
        "id": "test_0",
        "question": "who wrote hamlet?",
        "golden_answers": ["Shakespeare", "William Shakespeare"],
        "data_source": "nq",
    },
    {"question": "capital of france", "golden_answers": "Paris"},  # no id, a lone gold string
    # Search-R1's processed parquet rows keep the answers under reward_model
    {
        "id": "7",
        "question": "2+2?",
        "reward_model": {"ground_truth": {"target": ["4"]}},
        "data_source": "hotpotqa",
    },
]


@pytest.mark.parametrize("name,gz", [("qs.jsonl", False), ("qs.jsonl.gz", True), ("qs.json", None)])
def test_synthetic_question_files_load(tmp_path, name, gz):
    path = tmp_path / name
    if gz is None:
        path.write_text(json.dumps(ROWS))
    else:
        _write_jsonl(path, ROWS, gz=gz)
    loaded = load_questions(str(path))
    assert [q[0] for q in loaded] == ["nq-test_0", "qs-2", "hotpotqa-7"]
    assert loaded[0][1] == {"question": "who wrote hamlet?", "data_source": "nq"}
    assert [q[2] for q in loaded] == [["Shakespeare", "William Shakespeare"], ["Paris"], ["4"]]


def test_two_files_with_the_same_ids_keep_every_question(tmp_path):
    a = _write_jsonl(tmp_path / "a.jsonl", [{"id": "1", "question": "q1", "golden_answers": ["x"]}])
    b = _write_jsonl(tmp_path / "b.jsonl", [{"id": "1", "question": "q2", "golden_answers": ["y"]}])
    ids = [q[0] for q in load_questions(f"{a},{b}")]
    assert len(set(ids)) == 2


@pytest.mark.parametrize(
    "bad,message",
    [
        ("{not json", "line 3: not JSON"),
        (json.dumps({"golden_answers": ["x"]}), "line 3: 'question' must be a non-empty string"),
        (json.dumps({"question": "q", "golden_answers": []}), "line 3: 'golden_answers' must be"),
        (
            json.dumps({"question": "q", "golden_answers": [1, 2]}),
            "line 3: 'golden_answers' must be",
        ),
        (json.dumps({"question": "q"}), "line 3: 'golden_answers' must be"),
        (json.dumps(["q", "a"]), "line 3: a question row must be an object"),
    ],
)
def test_malformed_question_rows_are_named(tmp_path, bad, message):
    path = _write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], ROWS[1], bad])
    with pytest.raises(QuestionsError) as err:
        load_questions(str(path))
    assert str(path) in str(err.value) and message in str(err.value)


def test_unreadable_sources_are_refused_clearly(tmp_path):
    with pytest.raises(QuestionsError, match="no question file"):
        load_questions(str(tmp_path / "missing.jsonl"))
    (tmp_path / "q.csv").write_text("question,answer\n")
    with pytest.raises(QuestionsError, match="unknown question format"):
        load_questions(str(tmp_path / "q.csv"))
    # without the datasets package, or with it and no hub (this machine), a clear refusal
    with pytest.raises(QuestionsError, match="datasets"):
        load_questions("hf:nq:test")


def test_parquet_questions(tmp_path):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        (tmp_path / "q.parquet").write_bytes(b"PAR1")
        with pytest.raises(QuestionsError, match="needs pyarrow"):
            load_questions(str(tmp_path / "q.parquet"))
        return
    pq.write_table(
        pa.Table.from_pylist([ROWS[0], {"question": "", "golden_answers": ["x"]}]),
        tmp_path / "q.parquet",
    )
    with pytest.raises(QuestionsError, match=r"q.parquet row 2: 'question'"):
        load_questions(str(tmp_path / "q.parquet"))


def test_environment_selects_the_data(home, tmp_path, monkeypatch):
    train = _write_jsonl(
        tmp_path / "train.jsonl",
        [{"question": f"q{i}", "golden_answers": ["a"]} for i in range(12)],
    )
    test = _write_jsonl(
        tmp_path / "test.jsonl",
        [{"question": "q0", "golden_answers": ["a"]}, {"question": "t", "golden_answers": ["b"]}],
    )
    corpus = _write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"id": "1", "contents": '"Alpha"\nthe first letter'},
            {"id": "2", "title": "Beta", "text": "the second letter"},
        ],
    )
    monkeypatch.setenv("WHALE_SEARCHQA_TRAIN", str(train))
    monkeypatch.setenv("WHALE_SEARCHQA_TEST", str(test))
    monkeypatch.setenv("WHALE_SEARCHQA_CORPUS", str(corpus))
    domain = SearchQA()
    assert len(domain.tasks("test")) == 2
    # q0 is asked in test, so it leaves train; a quarter of the rest is the harness split
    assert len(domain.tasks("harness")) == 2 and len(domain.tasks("train")) == 9
    assert domain.tools["search"](["second"], 1)[0][0]["title"] == "Beta"


def test_malformed_corpus_rows_are_named(home, tmp_path, monkeypatch):
    corpus = _write_jsonl(
        tmp_path / "corpus.jsonl", [{"id": "1", "contents": '"A"\ntext'}, {"id": "2", "body": "x"}]
    )
    with pytest.raises(CorpusError, match=r"corpus.jsonl line 2: a passage needs 'contents'"):
        list(read_corpus(corpus))
    monkeypatch.setenv("WHALE_SEARCHQA_CORPUS", str(corpus))
    with pytest.raises(CorpusError, match=r"corpus.jsonl line 2"):
        SearchQA()
    assert not list((home / "indexes").glob("*")), "a failed build leaves no file behind"


# ---- the search tool ------------------------------------------------------------------------


def test_index_is_built_once_and_reused(home):
    first = SearchQA()
    [db] = (home / "indexes").glob("*.db")
    built = db.stat().st_mtime_ns
    second = SearchQA()  # a second process would do the same: open, not rebuild
    assert second.index.path == db and db.stat().st_mtime_ns == built
    assert len(first.index) == len(list(read_corpus(SAMPLE / "corpus.jsonl.gz")))


def test_search_finds_the_answering_passage(sample_index):
    [hits] = sample_index.search(["What is the atomic number of Neon?"], 3)
    assert "element-10" in [h["id"] for h in hits]
    assert set(hits[0]) == {"id", "title", "text", "score"}
    assert hits == sorted(hits, key=lambda h: -h["score"])
    foldoc = [
        json.loads(line)
        for line in (SAMPLE / "test.jsonl").read_text().splitlines()
        if '"foldoc"' in line
    ][:10]
    found = sample_index.search([q["question"] for q in foldoc], 3)
    answered = sum(
        any(q["golden_answers"][0] == h["title"] for h in hits) for q, hits in zip(foldoc, found)
    )
    assert answered >= 8, "acronym questions find their FOLDOC entry"


@pytest.mark.parametrize(
    "query",
    [
        '"',
        'say "hi',
        "neon AND",
        "AND OR NOT",
        "*",
        "neo*",
        "NEAR(neon argon",
        "title:neon",
        "^neon",
        "(",
        "",
        "   ",
        "_ - + :",
        "neon " * 5000,
        "ünïcödé ☃ 中文",
    ],
)
def test_hostile_queries_do_not_raise(sample_index, query):
    [hits] = sample_index.search([query], 3)
    assert isinstance(hits, list) and len(hits) <= 3


def test_search_limits_are_explained(sample_index):
    assert sample_index.search("neon", 1)[0][0]["title"] == "Neon"  # a lone string is one query
    with pytest.raises(ValueError, match="topk must be an integer from 1 to 20"):
        sample_index.search(["neon"], 100)
    with pytest.raises(ValueError, match="at most 16 queries"):
        sample_index.search(["neon"] * 17, 1)
    with pytest.raises(ValueError, match="list of strings"):
        sample_index.search([1, 2], 1)
    assert sample_index.search([], 3) == []
    assert json.loads(json.dumps(sample_index.search(["neon", "argon"], 2)))  # JSON for the trace


def test_dense_retriever_refuses_clearly_when_missing(sample_index, tmp_path):
    try:
        import faiss  # noqa: F401
        import sentence_transformers  # noqa: F401

        pytest.skip("dense retrieval packages are installed here")
    except ImportError:
        pass
    with pytest.raises(RetrieverUnavailable, match="sentence-transformers and faiss"):
        DenseIndex(sample_index, tmp_path / "e5_Flat.index")


# ---- the verifier ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer,golds,score",
    [
        ("The Beatles", ["beatles"], 1.0),
        ("beatles", ["The Beatles"], 1.0),
        ("10.", ["10"], 1.0),
        ("I think so. <answer> Neon </answer> Hope this helps", ["neon"], 1.0),
        ("<answer>argon</answer> no wait <answer>Neon</answer>", ["neon"], 1.0),  # the last one
        ("<ANSWER>neon</ANSWER>", ["Neon"], 1.0),
        ("William Shakespeare", ["Shakespeare", "William Shakespeare"], 1.0),
        ("Shakespeare, William", ["William Shakespeare"], 0.0),
        ("The answer is Neon", ["Neon"], 0.0),  # exact match, not containment
        ("", ["Neon"], 0.0),
        ("<answer></answer>", ["Neon"], 0.0),
        ("<answer>the</answer>", ["a"], 0.0),  # nothing left after normalisation is no answer
        (None, ["Neon"], 0.0),
        ("Device-Control 2", ["Device Control 2"], 0.0),  # punctuation is removed, not spaced
        ("Mint is not TRAC!", ["Mint Is Not TRAC"], 1.0),
    ],
)
def test_exact_match(answer, golds, score):
    assert exact_match(answer, golds) == score


def test_domain_scores_by_exact_match_over_the_stored_golds(home):
    task = Task("t", {"question": "Which band?"}, json.dumps(["The Beatles", "Beatles"]))
    domain = get_domain("searchqa")
    assert domain.score("<answer>the beatles</answer>", task) == 1.0
    assert domain.score("<answer>The Rolling Stones</answer>", task) == 0.0


def test_f1_is_token_overlap_best_over_golds():
    assert f1("<answer>William Shakespeare</answer>", ["Shakespeare"]) == pytest.approx(2 / 3)
    assert f1("the cat sat", ["a cat sat down", "dog"]) == pytest.approx(0.8)
    assert f1("Neon", ["neon"]) == 1.0
    assert f1("", ["neon"]) == 0.0
    assert f1("argon", ["neon"]) == 0.0


def test_llm_judge_is_asked_only_when_exact_match_fails(home, monkeypatch):
    with openai_stub(["yes", "no", 500]) as (url, seen):
        monkeypatch.setenv("WHALE_SEARCHQA_JUDGE_URL", url)
        monkeypatch.setenv("WHALE_SEARCHQA_JUDGE_MODEL", "judge")
        monkeypatch.setenv("JUDGE_KEY", "sk-test")
        monkeypatch.setenv("WHALE_SEARCHQA_JUDGE_KEY_ENV", "JUDGE_KEY")
        domain = SearchQA()
        task = Task("t", {"question": "Who wrote Hamlet?"}, json.dumps(["William Shakespeare"]))
        assert domain.score("<answer>William Shakespeare</answer>", task) == 1.0
        assert seen == []  # exact match needs no judge
        assert domain.score("<answer>Shakespeare, the bard</answer>", task) == 1.0  # "yes"
        assert domain.score("<answer>Marlowe</answer>", task) == 0.0  # "no"
        assert domain.score("<answer>Bacon</answer>", task) == 0.0  # the judge failed: 500
        assert domain.score("", task) == 0.0 and len(seen) == 3  # no answer, no question asked
    prompt = seen[0]["body"]["messages"][0]["content"]
    assert "Who wrote Hamlet?" in prompt and "Shakespeare, the bard" in prompt
    assert seen[0]["authorization"] == "Bearer sk-test"
    assert LLMJudge(url, "m")("q", "a", ["b"]) == 0.0  # a dead endpoint scores 0, never raises


# ---- a real evaluation ----------------------------------------------------------------------


def test_seed_harness_searches_through_the_gateway(whale_env):
    # Two 200-word-passage turns of the CPU model: slack for a machine shared with other jobs.
    env = {**whale_env, "WHALE_ROLLOUT_TIMEOUT": "500"}
    out = whale_eval_json(
        REPO / "harness_archive/seeds/searchqa/seed.py",
        env,
        "--domain",
        "searchqa",
        "--limit",
        "2",
        "-k",
        "1",
    )
    assert out["n_rollouts"] == 2
    assert set(out["statuses"]) <= {"pass", "fail"}, out  # every rollout finished with an answer
    engine = open_engine(Path(whale_env["WHALE_HOME"]) / "whale.db")
    with read_session(engine) as s:
        rollouts = s.exec(select(Rollout).where(Rollout.run_id == out["run_id"])).all()
        steps = s.exec(
            select(Step)
            .where(col(Step.rollout_id).in_([r.id for r in rollouts]))
            .order_by(Step.rollout_id, Step.idx)
        ).all()
    for rollout in rollouts:
        mine = [st for st in steps if st.rollout_id == rollout.id]
        assert mine[0].kind == "tool" and mine[0].tool == "search"
        assert mine[0].request == {"args": [[rollout.task["question"]], 1], "kwargs": {}}
        [hits] = mine[0].response["result"]
        assert len(hits) == 1 and {"id", "title", "text", "score"} <= set(hits[0])
        assert 1 <= sum(st.kind == "model" for st in mine) <= 2
