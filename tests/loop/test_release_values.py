"""Every value of tests/loop/release_values.py is asserted by a test: the ones the paper files'
dry run shows are in test_paper_experiments.py; here are those the workbench holds elsewhere
(the domains' splits and tools, the starting harnesses, the retriever), and a check that no
value is left unasserted."""

import ast
import re

import chess

from app.domains import get_domain, skill_of
from app.domains.chess_puzzles import SPLIT_SEED, SPLIT_SIZES, TEST_TASKS, bucket_of, position_key
from app.domains.retrieval import E5_MODEL
from app.domains.searchqa import HARNESS_SEED, HARNESS_SIZE, HARNESS_SOURCE, HF_SHORT
from app.harness_code import declared_turns
from app.loop.schedule import PAPER_TRAIN_ROWS
from app.read.benchmarks import benchmark_breakdown
from sandbox.runner import TOOL_OUTPUT_CHARS
from tests.conftest import REPO
from tests.loop.release_values import RELEASE

H0 = REPO / "harness_archive" / "paper"


def r(domain: str, key: str):
    return RELEASE[domain][key].value


def h0(domain: str) -> str:
    return (H0 / domain / "h0.py").read_text()


def test_every_release_value_is_asserted_by_a_test():
    """A value read from the release and never compared with the workbench proves nothing: each
    key must be named (as a string) by a test, not only by the table."""
    texts = [p.read_text() for p in (REPO / "tests").rglob("test_*.py")]
    keys = {key for values in RELEASE.values() for key in values}
    unasserted = sorted(k for k in keys if not any(f'"{k}"' in text for text in texts))
    assert not unasserted, f"release values no test asserts: {unasserted}"


def test_each_launcher_starts_from_the_h0_the_workbench_rewrote():
    for domain in RELEASE:
        launchers = {
            r(domain, key)
            for key in (
                "starting_harness_whale",
                "starting_harness_rsft_only",
                "starting_harness_mh_only",
            )
        }
        assert len(launchers) == 1  # WHALE and both baselines start from one h0
        release_file = launchers.pop().split("environments/")[1]
        assert release_file in ast.get_docstring(ast.parse(h0(domain)))


def test_the_paper_domains_train_on_the_release_s_rows():
    for domain in RELEASE:
        assert PAPER_TRAIN_ROWS[domain] == r(domain, "train_size")
    assert r("math", "train_size") == r("math", "dedup_size")  # DAPO-Math-17K de-duplicated
    assert "dapo_math_17k_dedup" in r("math", "train_set")
    assert SPLIT_SIZES["train"] == r("chess", "train_size")
    assert "train_16384" in r("chess", "train_set")
    # search QA: the script's default file is the NQ-only reading, not the one the paper files
    # take (tests/loop/test_paper_experiments.py, DIFFERS)
    assert "train_nq_single" in r("searchqa", "train_set")
    assert r("searchqa", "script_train_rows") < r("searchqa", "train_size")


def test_the_harness_splits_are_drawn_as_the_release_draws_them():
    # search QA: 256 NQ questions with seed 42 from the train set (not disjoint from it)
    assert "nq_256" in r("searchqa", "harness_split")
    assert (HARNESS_SIZE, HARNESS_SEED, HARNESS_SOURCE) == (
        r("searchqa", "harness_split_size"),
        r("searchqa", "harness_split_seed"),
        "nq",
    )
    assert "NQ only" in r("searchqa", "harness_split_draw")
    # math: 256 from the training pool; the release draws them with seed 42 and leaves them in
    # D_weight, the workbench takes the pool's first 256 out of it (docs/paper.md lists it)
    from app.domains.math_problems import DEFAULT_HARNESS_SIZE

    assert DEFAULT_HARNESS_SIZE == r("math", "harness_split_size")
    assert "seed42_256" in r("math", "harness_split") and r("math", "harness_split_seed") == 42
    assert "training pool" in r("math", "harness_split_draw")
    # chess: position hash buckets with seed 42, 256 harness and a 1,024-puzzle test pool
    assert "mh_val_256" in r("chess", "harness_split")
    assert SPLIT_SEED == r("chess", "split_seed") == r("chess", "harness_split_seed")
    assert SPLIT_SIZES["harness"] == r("chess", "harness_split_size")
    assert SPLIT_SIZES["test"] == r("chess", "test_pool_size")
    assert "sha256" in r("chess", "harness_split_draw")
    key = position_key(chess.Board())
    assert bucket_of(key, SPLIT_SIZES) == bucket_of(key, SPLIT_SIZES, r("chess", "split_seed"))


def test_chess_deduplicates_by_the_position_the_solver_faces():
    assert "piece placement + side to move" in r("chess", "dedup")
    board = chess.Board()
    assert position_key(board) == "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w"
    board.set_castling_fen("-")  # castling rights and clocks do not make another puzzle
    assert position_key(board) == "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w"


def test_the_test_sets_are_the_release_s():
    assert set(HF_SHORT) == set(r("searchqa", "test_sets"))
    assert {"yentinglin/aime_2025", "Maxwell-Jia/AIME_2024"} == set(r("math", "test_sets"))
    assert "aime" in (REPO / "docs" / "domains.md").read_text().lower()
    assert "test_256" in r("chess", "test_sets")[0] and TEST_TASKS == 256


def test_search_qa_reports_each_benchmark_and_their_mean():
    assert r("searchqa", "reports_per_benchmark_and_average") is True
    breakdown = benchmark_breakdown(
        {"a": 1.0, "b": 0.0, "c": 0.5}, {"a": "nq", "b": "nq", "c": "popqa"}
    )
    assert breakdown["benchmarks"]["nq"] == {"mean_at_k": 0.5, "n_tasks": 2}
    assert breakdown["macro_mean_at_k"] == 0.5  # (0.5 + 0.5) / 2, not the pooled 0.5 by luck
    pooled = benchmark_breakdown({"a": 1.0, "b": 1.0, "c": 0.0}, {"a": "nq", "b": "nq", "c": "x"})
    assert pooled["macro_mean_at_k"] == 0.5  # the benchmarks' mean, not the questions' 0.667


def test_the_search_qa_h0_asks_the_retriever_as_the_release_s():
    code = h0("searchqa")
    assert r("searchqa", "passage_token_cap") == 200
    assert re.search(rf"^PASSAGE_TOKENS = {r('searchqa', 'passage_token_cap')}\b", code, re.M)
    # top-1 of the model's own first query, whatever topk it asks for
    assert r("searchqa", "retriever_topk") == 1 and r("searchqa", "query_writer") == "the model"
    assert "tools.search([queries[0]], 1, max_doc_tokens=cap)" in code
    assert E5_MODEL == r("searchqa", "retriever_model")
    assert "FAISS" in r("searchqa", "retriever_index")
    retrieval = (REPO / "app" / "domains" / "retrieval.py").read_text()
    assert "faiss.IndexFlatIP" in retrieval  # a flat inner-product index, as e5_Flat.index


def test_tool_responses_are_cut_where_the_release_cuts_them_or_the_difference_is_listed():
    # search QA: verl's cut is off (99999); the harness's passage cap bounds the answer
    assert r("searchqa", "max_tool_response_length") == 99999
    # math: verl cuts a tool response at 4,096 characters; the workbench's sandbox tool at
    # 8,000 of stdout and of stderr each (docs/paper.md lists the difference)
    assert r("math", "max_tool_response_length") == 4096 < TOOL_OUTPUT_CHARS
    assert "4,096" in (REPO / "docs" / "paper.md").read_text()
    # chess: no tool, the board is the environment's message
    assert r("chess", "max_tool_response_length") is None
    assert not get_domain("chess").tools.get("python")


def test_each_domain_gives_its_proposer_a_skill_document():
    for domain in RELEASE:
        assert r(domain, "skill_md_path").endswith("/SKILL.md")
        assert skill_of(get_domain(domain))  # the workbench's own guide (docs/paper.md: differs)


def test_the_starting_harnesses_declare_the_release_s_turn_limits():
    for domain in RELEASE:
        turns = declared_turns(h0(domain))
        assert turns == r(domain, "max_turns") <= r(domain, "max_turns_clamp")
