import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
from sqlmodel import col, select
from transformers import AutoTokenizer

from app.db import open_engine, read_session
from app.db.schema import Rollout, Step
from app.domains import SPLITS, Task, get_domain
from app.domains.retrieval import (
    BM25Index,
    CorpusError,
    DenseIndex,
    E5Encoder,
    PassageCutter,
    RetrieverUnavailable,
    build_dense_index,
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
from app.llm.local import prepare_model
from app.read.benchmarks import benchmark_breakdown, benchmarks_line
from tests.conftest import MISSING, REPO, whale_eval_json
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
    # as the release draws it, the harness split is a part of the train questions
    assert questions["harness"] <= questions["train"]
    assert len({t.id for s in ("train", "test") for t in a.tasks(s)}) == len(
        a.tasks("train")
    ) + len(a.tasks("test"))


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
    assert [q.id for q in loaded] == ["nq-test_0", "qs-2", "hotpotqa-7"]
    assert loaded[0].public == {"question": "who wrote hamlet?", "data_source": "nq"}
    assert [q.golds for q in loaded] == [["Shakespeare", "William Shakespeare"], ["Paris"], ["4"]]


def test_two_files_with_the_same_ids_keep_every_question(tmp_path):
    a = _write_jsonl(tmp_path / "a.jsonl", [{"id": "1", "question": "q1", "golden_answers": ["x"]}])
    b = _write_jsonl(tmp_path / "b.jsonl", [{"id": "1", "question": "q2", "golden_answers": ["y"]}])
    ids = [q.id for q in load_questions(f"{a},{b}")]
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
    # q0 is asked in test, so it leaves train; the harness split is drawn from the other 11
    assert len(domain.tasks("harness")) == 2 and len(domain.tasks("train")) == 11
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


@pytest.fixture(scope="module")
def stand_in_encoder(model_cache):
    """The demo model's own embeddings stand in for e5's (intfloat/e5-base-v2 cannot be
    downloaded here): the same loading, prefixes, pooling and normalisation."""
    return E5Encoder(str(prepare_model(model_cache, say=lambda m: None)))


CORPUS_ROWS = [
    {"id": "p1", "contents": '"Neon"\nNeon is a noble gas with atomic number 10.'},
    {"id": "p2", "contents": '"Paris"\nParis is the capital and largest city of France.'},
    {"id": "p3", "contents": '"Hamlet"\nHamlet is a tragedy written by William Shakespeare.'},
    {"id": "p4", "contents": '"Volcano"\nA volcano is a rupture in the crust of a planet.'},
]


def test_dense_retriever_searches_a_faiss_index_built_from_the_corpus(tmp_path, stand_in_encoder):
    corpus = _write_jsonl(tmp_path / "corpus.jsonl", CORPUS_ROWS)
    passages = BM25Index.open(corpus, tmp_path / "indexes", quiet=True)
    index_file = tmp_path / "e5_Flat.index"
    assert build_dense_index(corpus, index_file, stand_in_encoder, batch_size=3, quiet=True) == 4
    dense = DenseIndex(passages, index_file, encoder=stand_in_encoder)
    for row in CORPUS_ROWS:  # a passage's own text finds it first
        [hits] = dense.search([row["contents"].split("\n")[1]], 2)
        assert hits[0]["id"] == row["id"] and len(hits) == 2
        assert set(hits[0]) == {"id", "title", "text", "score"}
        assert hits[0]["score"] >= hits[1]["score"]
    assert [len(hits) for hits in dense.search(["neon", "paris"], 1)] == [1, 1]
    with pytest.raises(ValueError, match="topk must be an integer"):
        dense.search(["neon"], 0)
    # an index of another corpus is refused before any search
    other = _write_jsonl(tmp_path / "other.jsonl", CORPUS_ROWS[:2])
    with pytest.raises(RetrieverUnavailable, match="holds 4 vectors, the corpus 2 passages"):
        DenseIndex(
            BM25Index.open(other, tmp_path / "indexes", quiet=True),
            index_file,
            encoder=stand_in_encoder,
        )
    with pytest.raises(RetrieverUnavailable, match="no FAISS index"):
        DenseIndex(passages, tmp_path / "absent.index", encoder=stand_in_encoder)


def test_the_domain_uses_the_dense_retriever_when_asked(home, tmp_path, monkeypatch, model_cache):
    corpus = _write_jsonl(tmp_path / "corpus.jsonl", CORPUS_ROWS)
    model = str(prepare_model(model_cache, say=lambda m: None))
    index_file = tmp_path / "e5_Flat.index"
    build_dense_index(corpus, index_file, E5Encoder(model), quiet=True)
    monkeypatch.setenv("WHALE_SEARCHQA_CORPUS", str(corpus))
    monkeypatch.setenv("WHALE_SEARCHQA_RETRIEVER", "dense")
    with pytest.raises(ValueError, match="needs WHALE_SEARCHQA_DENSE_INDEX"):
        SearchQA()
    monkeypatch.setenv("WHALE_SEARCHQA_DENSE_INDEX", str(index_file))
    monkeypatch.setenv("WHALE_SEARCHQA_DENSE_MODEL", model)
    domain = SearchQA()
    assert isinstance(domain.retriever, DenseIndex)
    [hits] = domain.tools["search"]([CORPUS_ROWS[2]["contents"].split("\n")[1]], 1)
    assert [h["id"] for h in hits] == ["p3"]


def test_max_doc_tokens_cuts_passages_as_the_release_does(home, tmp_path, monkeypatch, model_cache):
    text = " ".join(f"word{i}" for i in range(300))
    corpus = _write_jsonl(
        tmp_path / "corpus.jsonl",
        [{"id": "long", "contents": f'"Long Title"\n{text}'}, {"id": "s", "contents": "short"}],
    )
    monkeypatch.setenv("WHALE_SEARCHQA_CORPUS", str(corpus))
    search = SearchQA().tools["search"]
    [[whole]] = search(["word7"], 1)
    assert whole["text"] == text  # no max_doc_tokens: the whole passage
    [[cut]] = search(["word7"], 1, max_doc_tokens=200)
    # without a tokenizer named, tokens are words; the title line's 2 words count
    assert cut["title"] == "Long Title" and cut["text"].split() == text.split()[:198]
    for bad in (0, -3, "200", 2.5, True):
        with pytest.raises(ValueError, match="max_doc_tokens must be a positive integer"):
            search(["word7"], 1, max_doc_tokens=bad)

    model = prepare_model(model_cache, say=lambda m: None)
    monkeypatch.setenv("WHALE_SEARCHQA_PASSAGE_TOKENIZER", str(model))
    [[cut]] = SearchQA().tools["search"](["word7"], 1, max_doc_tokens=200)
    tokenizer = AutoTokenizer.from_pretrained(model)
    contents = f'"{cut["title"]}"\n{cut["text"]}'
    assert len(tokenizer.encode(contents, add_special_tokens=False)) in range(195, 201)
    assert text.startswith(cut["text"]) and len(cut["text"]) < len(text)
    cutter = PassageCutter(str(model))
    short = {"id": "s", "title": "", "text": "short", "score": 1.0}
    assert cutter.cut(short, 200) is short  # under the cap: unchanged
    assert PassageCutter(str(tmp_path / "no-such-tokenizer")).name
    with pytest.raises(RetrieverUnavailable, match="could not be loaded"):
        PassageCutter(str(tmp_path / "no-such-tokenizer")).cut({**short, "text": text}, 10)


# ---- the release's splits -------------------------------------------------------------------


def search_r1_row(source, index, question, answers):
    """A row of Search-R1's processed parquet as the release's files hold it."""
    return {
        "data_source": f"searchR1_{source}",
        "prompt": [
            {"role": "user", "content": f"Answer the given question. ... Question: {question}\n"}
        ],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"split": "train", "index": index, "question": question},
    }


def write_parquet(path, rows):
    pa = pytest.importorskip("pyarrow", reason=MISSING + "pyarrow (pip install -e '.[parquet]')")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_search_r1_processed_rows_load_with_their_benchmark(tmp_path):
    rows = [search_r1_row("nq", 4, "who sang x?", ["Y"]), search_r1_row("hotpotqa", 4, "z?", ["w"])]
    no_extra_question = search_r1_row("popqa", 9, "what is q?", ["r"])
    del no_extra_question["extra_info"]["question"]  # Search-R1's own files: only the prompt
    loaded = load_questions(str(write_parquet(tmp_path / "t.parquet", [*rows, no_extra_question])))
    assert [q.id for q in loaded] == ["nq-4", "hotpotqa-4", "popqa-9"]
    assert [q.public for q in loaded] == [
        {"question": "who sang x?", "data_source": "nq"},
        {"question": "z?", "data_source": "hotpotqa"},
        {"question": "what is q?", "data_source": "popqa"},
    ]
    assert [q.key for q in loaded][0] == ("nq", 4, "who sang x?")


# numpy's RandomState(42).permutation(200)[:20]: the rows pandas' DataFrame.sample(20,
# random_state=42) picks from 200, as the release's build_meta_harness_nq_256.py draws
RELEASE_DRAW_OF_200 = [
    95,
    15,
    30,
    158,
    128,
    115,
    69,
    170,
    174,
    45,
    66,
    182,
    165,
    78,
    186,
    177,
    56,
    152,
    82,
    68,
]


def release_train(tmp_path):
    nq = [search_r1_row("nq", i, f"nq question {i}?", [f"a{i}"]) for i in range(200)]
    hotpot = [search_r1_row("hotpotqa", i, f"hotpot question {i}?", ["b"]) for i in range(100)]
    mixed = [row for pair in zip(nq[:100], hotpot) for row in pair] + nq[100:]  # file order
    return nq, write_parquet(tmp_path / "train.parquet", mixed)


def test_the_harness_split_is_the_release_draw_of_nq_train_rows(home, tmp_path, monkeypatch):
    nq, train = release_train(tmp_path)
    test = _write_jsonl(
        tmp_path / "test.jsonl",
        [{"question": "t?", "golden_answers": ["t"], "data_source": "bamboogle"}],
    )
    monkeypatch.setenv("WHALE_SEARCHQA_TRAIN", str(train))
    monkeypatch.setenv("WHALE_SEARCHQA_TEST", str(test))
    monkeypatch.setenv("WHALE_SEARCHQA_HARNESS_SIZE", "20")
    domain = SearchQA()
    harness = domain.tasks("harness")
    assert [t.public["question"] for t in harness] == [
        nq[i]["extra_info"]["question"] for i in RELEASE_DRAW_OF_200
    ]
    assert all(t.public["data_source"] == "nq" for t in harness)
    assert len(domain.tasks("train")) == 300  # the release trains on its harness rows too
    assert {t.id for t in harness} <= {t.id for t in domain.tasks("train")}
    assert [t.id for t in SearchQA().tasks("harness")] == [t.id for t in harness]  # fixed

    monkeypatch.setenv("WHALE_SEARCHQA_HARNESS_DISJOINT", "1")
    disjoint = SearchQA()
    assert len(disjoint.tasks("train")) == 280
    assert not {t.id for t in disjoint.tasks("harness")} & {t.id for t in disjoint.tasks("train")}


def test_harness_base_rows_come_first_and_leave_the_draw(home, tmp_path, monkeypatch):
    nq, train = release_train(tmp_path)
    base = write_parquet(tmp_path / "base.parquet", [nq[95], nq[3], nq[7]])
    monkeypatch.setenv("WHALE_SEARCHQA_TRAIN", str(train))
    monkeypatch.setenv("WHALE_SEARCHQA_HARNESS_SIZE", "10")
    monkeypatch.setenv("WHALE_SEARCHQA_HARNESS_BASE", str(base))
    harness = [t.public["question"] for t in SearchQA().tasks("harness")]
    assert harness[:3] == ["nq question 95?", "nq question 3?", "nq question 7?"]
    # the other 7 are drawn, with the seed, from the 197 NQ rows left
    rest = [i for i in range(200) if i not in (95, 3, 7)]
    order = np.random.RandomState(42).permutation(197)[:7]
    assert harness[3:] == [f"nq question {rest[i]}?" for i in order]
    stranger = write_parquet(
        tmp_path / "stranger.parquet", [search_r1_row("nq", 999, "new?", ["x"])]
    )
    monkeypatch.setenv("WHALE_SEARCHQA_HARNESS_BASE", str(stranger))
    with pytest.raises(
        QuestionsError, match=r"1 harness base question.*not train questions.*'new\?'"
    ):
        SearchQA()


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
    # the test split's tasks name their benchmark: each one's mean@k and their plain mean
    by_task = {r.task_id: (r.task["data_source"], r.reward or 0.0) for r in rollouts}
    expected = {}
    for source, reward in by_task.values():
        expected.setdefault(source, []).append(reward)
    assert out["benchmarks"] == {
        name: {"mean_at_k": sum(v) / len(v), "n_tasks": len(v)} for name, v in expected.items()
    }
    means = [b["mean_at_k"] for b in out["benchmarks"].values()]
    assert out["macro_mean_at_k"] == pytest.approx(sum(means) / len(means))


def test_benchmark_breakdown_weighs_each_benchmark_the_same():
    task_means = {"nq-1": 1.0, "nq-2": 1.0, "nq-3": 1.0, "nq-4": 0.0, "bamboogle-1": 0.0}
    names = {t: t.split("-")[0] for t in task_means}
    breakdown = benchmark_breakdown(task_means, names)
    assert breakdown["benchmarks"] == {
        "bamboogle": {"mean_at_k": 0.0, "n_tasks": 1},
        "nq": {"mean_at_k": 0.75, "n_tasks": 4},
    }
    assert breakdown["macro_mean_at_k"] == 0.375  # the pooled mean would be 0.6
    assert "mean over 2 benchmarks 0.375" in benchmarks_line(breakdown)
    assert benchmark_breakdown(task_means, {}) is None  # tasks without a benchmark: no view


def test_validation_rows_form_the_val_split_and_leave_the_final_test(home, tmp_path, monkeypatch):
    """As the release: in-training test points on test_100 (100 rows a benchmark), the final
    test on the test file less those rows (build_final_test_excluding_val.py matches them by
    benchmark, extra_info.index, question and target)."""
    from tests.loop.release_values import RELEASE

    assert RELEASE["searchqa"]["final_test_excludes_val"].value is True
    assert RELEASE["searchqa"]["final_test_row_key"].value == (
        "data_source",
        "index",
        "question",
        "target",
    )
    per_benchmark = 3  # the release's 100, small
    assert RELEASE["searchqa"]["val_rows_per_benchmark"].value == 100
    assert "test_100" in RELEASE["searchqa"]["val_set"].value
    benchmarks = ("nq", "popqa")
    test_rows = [
        search_r1_row(b, i, f"{b} question {i}?", [f"{b}{i}"]) for b in benchmarks for i in range(8)
    ]
    test = write_parquet(tmp_path / "test.parquet", test_rows)
    # the validation file: the first rows of each benchmark, as Search-R1's JSONL could hold
    # them, plus a row with the same question but another index, which is not a test row
    val_rows = [
        {
            "question": f"{b} question {i}?",
            "golden_answers": [f"{b}{i}"],
            "data_source": f"searchR1_{b}",
            "extra_info": {"index": i},
        }
        for b in benchmarks
        for i in range(per_benchmark)
    ]
    val = _write_jsonl(tmp_path / "val.jsonl", val_rows)
    train = _write_jsonl(
        tmp_path / "train.jsonl",
        [{"question": f"q{i}", "golden_answers": ["a"]} for i in range(12)]
        + [{"question": "nq question 0?", "golden_answers": ["nq0"]}],  # a validation question
    )
    monkeypatch.setenv("WHALE_SEARCHQA_TRAIN", str(train))
    monkeypatch.setenv("WHALE_SEARCHQA_TEST", str(test))
    monkeypatch.setenv("WHALE_SEARCHQA_VAL", str(val))
    domain = SearchQA()
    val_ids = [t.id for t in domain.tasks("val")]
    assert val_ids == [f"{b}-{i}" for b in benchmarks for i in range(per_benchmark)]
    final = [t.id for t in domain.tasks("test")]
    assert final == [f"{b}-{i}" for b in benchmarks for i in range(per_benchmark, 8)]
    assert not set(final) & set(val_ids)
    assert "nq question 0?" not in {t.public["question"] for t in domain.tasks("train")}


def test_validation_rows_that_match_no_test_row_are_refused(home, tmp_path, monkeypatch):
    test = write_parquet(tmp_path / "test.parquet", [search_r1_row("nq", 1, "x?", ["y"])])
    # the same question and answer under another index is another row (the release's key)
    val = write_parquet(tmp_path / "val.parquet", [search_r1_row("nq", 2, "x?", ["y"])])
    monkeypatch.setenv("WHALE_SEARCHQA_TEST", str(test))
    monkeypatch.setenv("WHALE_SEARCHQA_VAL", str(val))
    with pytest.raises(QuestionsError, match="none of the 1 validation questions is in the test"):
        SearchQA()
    with pytest.raises(ValueError, match="unknown split 'val'; known: train, harness, test$"):
        monkeypatch.delenv("WHALE_SEARCHQA_VAL")
        SearchQA().tasks("val")
