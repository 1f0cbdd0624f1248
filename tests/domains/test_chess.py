"""The chess puzzle domain: the Lichess CSV loader, the per-rollout board tools, the verifier,
and the seed harness evaluated for real through sandbox, gateway and model."""

import csv
import gzip
import json
import sqlite3
import zlib

import chess
import pytest
import zstandard

from app.domains import SPLITS, Task, episode, get_domain
from app.domains.chess_puzzles import (
    COLUMNS,
    MAX_ILLEGAL_MOVES,
    SAMPLE,
    SAMPLE_SIZES,
    ChessPuzzles,
    PuzzleFileError,
    bucket_of,
    position_key,
)
from tests.conftest import REPO, whale_eval_json

HEADER = ",".join(COLUMNS)
# The example row of the Lichess database's documentation: a mate in two.
LICHESS_ROW = (
    "00sHx,q3k1nr/1pp1nQpp/3p4/1P2p3/4P3/B1PP1b2/B5PP/5K2 b k - 0 17,"
    "e8d7 a2e6 d7d8 f7f8,1760,80,83,72,mate mateIn2 middlegame short,"
    "https://lichess.org/yyznGmXs/black#34,Italian_Game Italian_Game_Classical_Variation"
)
# Black's king steps into the corner; Ra8# and Rb8# both mate, the line has Ra8#.
TWO_MATES_ROW = (
    "twoMt,6k1/5ppp/8/8/8/8/8/RR4K1 b - - 0 1,g8h8 a1a8,900,80,90,100,mate mateIn1 oneMove,,"
)
LONG_ROW = (
    "tooLg,r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3,"
    "f1c4 g8f6 f3g5 d7d5 e4d5 f6d5 g5f7 e8f7 d1f3 f7e6 b1c3 c6b4,1500,80,90,100,long,,"
)
ROWS = [LICHESS_ROW, TWO_MATES_ROW, LONG_ROW]


def write(path, lines):
    text = "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    elif path.suffix == ".zst":
        path.write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    else:
        path.write_text(text)
    return path


def every_task(domain):
    return [t for split in SPLITS for t in domain.tasks(split)]


@pytest.fixture(scope="module")
def sample():
    return ChessPuzzles()


def test_the_domain_is_registered_and_loads_the_shipped_sample():
    domain = get_domain("chess")
    assert domain.name == "chess" and domain.path == SAMPLE
    assert set(domain.tools) == {"observation", "move"}
    assert domain.seed_harness.is_file()


def positions(tasks):
    return [position_key(chess.Board(t.public["fen"])) for t in tasks]


def test_sample_splits_are_disjoint_deterministic_and_sized(sample):
    again = ChessPuzzles()
    split_ids = {s: [t.id for t in sample.tasks(s)] for s in SPLITS}
    for split in SPLITS:
        assert split_ids[split] == [t.id for t in again.tasks(split)]
        assert len(split_ids[split]) == SAMPLE_SIZES[split]  # 256, 64, 64 of the 400
    every = positions(every_task(sample))
    assert len(set(every)) == len(every) == sum(SAMPLE_SIZES.values())
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        sample.tasks("dev")


def sample_rows():
    with SAMPLE.open() as f:
        return list(csv.DictReader(f))


def as_line(row):
    return ",".join(row[c] for c in COLUMNS)


def test_a_repeated_position_lands_once_whatever_its_id(tmp_path):
    rows = sample_rows()[:120]
    lines = []
    for row in rows:  # each position twice: the copy has its own id and other move counters
        placement, side, castling, passant, _, _ = row["FEN"].split()
        copy = {**row, "PuzzleId": "dup-" + row["PuzzleId"]}
        copy["FEN"] = f"{placement} {side} {castling} {passant} 7 70"
        lines += [as_line(row), as_line(copy)]
    big = {"train": 1000, "harness": 1000, "test": 1000}
    domain = ChessPuzzles(write(tmp_path / "dups.csv", [HEADER, *lines]), sizes=big)
    tasks = every_task(domain)
    assert sorted(t.id for t in tasks) == sorted(r["PuzzleId"] for r in rows)  # first kept
    assert len(set(positions(tasks))) == len(tasks) == 120
    for split in SPLITS:  # with room everywhere, a position goes where its hash sends it
        assert all(bucket_of(key, big) == split for key in positions(domain.tasks(split)))


def test_the_split_follows_the_position_and_seed_not_the_id_or_the_run():
    keys = [position_key(chess.Board(t.public["fen"])) for t in every_task(ChessPuzzles())]
    sizes = {"train": 50, "harness": 25, "test": 25}
    seed_42 = [bucket_of(k, sizes) for k in keys]
    assert seed_42 == [bucket_of(k, sizes, seed=42) for k in keys]
    assert {"train", "harness", "test"} == set(seed_42)
    assert seed_42 != [bucket_of(k, sizes, seed=7) for k in keys]  # the seed changes the draw


def test_full_splits_overflow_and_reading_stops_once_all_are_full(tmp_path):
    rows = sample_rows()
    path = write(tmp_path / "p.csv", [HEADER, *map(as_line, rows)])
    domain = ChessPuzzles(path, sizes={"train": 5, "harness": 5, "test": 5})
    assert {s: len(domain.tasks(s)) for s in SPLITS} == {"train": 5, "harness": 5, "test": 5}
    # nothing is skipped but repeats, so the 15 chosen are the file's first 15 puzzles
    assert sorted(t.id for t in every_task(domain)) == sorted(r["PuzzleId"] for r in rows[:15])


def test_the_test_split_is_the_start_of_the_test_pool(tmp_path):
    sizes = {"train": 20, "harness": 5, "test": 10}
    pool = ChessPuzzles(sizes=sizes, test_tasks=10).tasks("test")
    assert [t.id for t in ChessPuzzles(sizes=sizes, test_tasks=4).tasks("test")] == [
        t.id for t in pool[:4]
    ]
    with pytest.raises(ValueError, match="sizes must give each"):
        ChessPuzzles(sizes={"train": 20, "harness": 5})


def test_public_fields_are_the_position_after_the_trigger_and_hide_the_solution(sample):
    with SAMPLE.open() as f:
        rows = {row["PuzzleId"]: row for row in csv.DictReader(f)}
    for task in every_task(sample):
        row = rows[task.id]
        trigger, *solution = row["Moves"].split()
        assert task.gold == " ".join(solution)
        assert set(task.public) == {
            "puzzle_id",
            "fen",
            "trigger",
            "side_to_move",
            "rating",
            "themes",
        }
        board = chess.Board(row["FEN"])
        board.push_uci(trigger)
        assert task.public["fen"] == board.fen() and task.public["trigger"] == trigger
        assert task.public["side_to_move"] == ("white" if board.turn else "black")
        assert not any(move in json.dumps(task.public) for move in solution)


def test_every_shipped_puzzle_is_a_mate_in_one_or_two(sample):
    for task in every_task(sample):
        board = chess.Board(task.public["fen"])
        line = task.gold.split()
        for uci in line:
            board.push_uci(uci)
        assert board.is_checkmate(), task.id
        plies = {"mateIn1": 1, "mateIn2": 3}
        assert [plies[t] for t in task.public["themes"] if t in plies] == [len(line)]


@pytest.mark.parametrize(
    "name,header", [("p.csv", True), ("p.csv", False), ("p.csv.gz", True), ("p.csv.zst", True)]
)
def test_lichess_files_load_in_every_supported_format(tmp_path, name, header):
    path = write(tmp_path / name, ([HEADER] if header else []) + ROWS)
    domain = ChessPuzzles(path)
    tasks = {t.id: t for t in every_task(domain)}
    assert set(tasks) == {"00sHx", "twoMt"}  # the 10-ply solution is beyond the paper's 1-9
    task = tasks["00sHx"]
    assert task.gold == "a2e6 d7d8 f7f8"
    assert task.public["trigger"] == "e8d7" and task.public["side_to_move"] == "white"
    assert task.public["rating"] == 1760 and "mateIn2" in task.public["themes"]


def test_the_environment_variable_chooses_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("WHALE_CHESS_PUZZLES", str(write(tmp_path / "mine.csv", [HEADER, *ROWS])))
    assert {t.id for t in every_task(ChessPuzzles())} == {"00sHx", "twoMt"}
    monkeypatch.setenv("WHALE_CHESS_PUZZLES", str(tmp_path / "absent.csv.zst"))
    with pytest.raises(
        PuzzleFileError, match="absent.csv.zst: no such puzzle file.*WHALE_CHESS_PUZZLES"
    ):
        ChessPuzzles()


BAD_ROWS = {
    "missing column": (
        "bad01,6k1/5ppp/8/8/8/8/8/RR4K1 b - - 0 1,g8h8 a1a8,900,80,90,100,mate,",
        r"line 3 \(puzzle bad01\): 9 columns, expected 10",
    ),
    "bad FEN": (
        "bad02,6k1/5ppp/8/8/8/8/RR4K1 b - - 0 1,g8h8 a1a8,900,80,90,100,mate,,",
        r"line 3 \(puzzle bad02\): bad FEN",
    ),
    "illegal move": (
        "bad03,6k1/5ppp/8/8/8/8/8/RR4K1 b - - 0 1,g8h8 a1h8,900,80,90,100,mate,,",
        r"line 3 \(puzzle bad03\): move 2 of Moves, 'a1h8', is not legal",
    ),
    "moved out of turn": (
        "bad04,6k1/5ppp/8/8/8/8/8/RR4K1 b - - 0 1,a1a8 g8h8,900,80,90,100,mate,,",
        r"line 3 \(puzzle bad04\): move 1 of Moves, 'a1a8', is not legal",
    ),
    "no solution": (
        "bad05,6k1/5ppp/8/8/8/8/8/RR4K1 b - - 0 1,g8h8,900,80,90,100,mate,,",
        r"line 3 \(puzzle bad05\): Moves must be the trigger and a solution",
    ),
    "no id": (
        ",6k1/5ppp/8/8/8/8/8/RR4K1 b - - 0 1,g8h8 a1a8,900,80,90,100,mate,,",
        r"line 3 \(puzzle \?\): empty PuzzleId",
    ),
    "rating": (
        "bad06,6k1/5ppp/8/8/8/8/8/RR4K1 b - - 0 1,g8h8 a1a8,high,80,90,100,mate,,",
        r"line 3 \(puzzle bad06\): Rating 'high' is not a whole number",
    ),
    "repeated id": (TWO_MATES_ROW, r"line 3 \(puzzle twoMt\): the same PuzzleId as line 2"),
}


@pytest.mark.parametrize("case", BAD_ROWS)
def test_a_malformed_row_is_named(tmp_path, case):
    row, error = BAD_ROWS[case]
    path = write(tmp_path / "bad.csv", [HEADER, TWO_MATES_ROW, row])
    with pytest.raises(PuzzleFileError, match=error) as raised:
        ChessPuzzles(path)
    assert str(path) in str(raised.value)


def test_a_header_without_the_moves_is_named(tmp_path):
    path = write(tmp_path / "bad.csv", ["PuzzleId,FEN,Rating", "x,8/8/8/8/8/8/8/8 w - - 0 1,1"])
    with pytest.raises(PuzzleFileError, match="line 1: header lacks Moves"):
        ChessPuzzles(path)


# ---------------------------------------------------------------- one rollout's board


@pytest.fixture(scope="module")
def lichess(tmp_path_factory):
    path = write(tmp_path_factory.mktemp("chess") / "p.csv", [HEADER, *ROWS])
    domain = ChessPuzzles(path)
    return domain, {t.id: t for t in every_task(domain)}


def test_the_observation_shows_the_board_after_the_trigger(lichess):
    domain, tasks = lichess
    env = episode(domain, tasks["00sHx"])
    seen = env.tools["observation"]()
    json.dumps(seen)  # it crosses the gateway as JSON
    assert seen["fen"] == tasks["00sHx"].public["fen"]
    assert seen["last_move"] == "e8d7" and seen["side_to_move"] == "white"
    assert seen["board"].splitlines()[0] == "q . . . . . n r"  # rank 8 on top, Black in lower case
    assert "a2e6" in seen["legal_moves"] and seen["state"] == "continue"


def test_playing_the_whole_line_solves_the_puzzle(lichess):
    domain, tasks = lichess
    env = episode(domain, tasks["00sHx"])
    first = env.tools["move"]("a2e6")
    assert first["result"] == "continue" and first["opponent_move"] == "d7d8"
    assert first["last_move"] == "d7d8" and first["side_to_move"] == "white"
    assert env.score(None) == 0.0  # half a line is no solve
    assert env.tools["move"]("f7f8") == {"result": "solved", "message": "puzzle solved"}
    assert env.score(None) == 1.0
    assert env.tools["move"]("f8e8")["result"] == "over"
    assert env.score(None) == 1.0


def test_a_legal_wrong_move_ends_the_puzzle_with_no_reward(lichess):
    domain, tasks = lichess
    env = episode(domain, tasks["00sHx"])
    assert env.tools["move"]("a3b4")["result"] == "wrong"
    assert env.tools["move"]("a2e6") == {"result": "over", "message": "the puzzle is over (wrong)"}
    assert env.score("<move>a2e6</move><move>f7f8</move>") == 0.0  # the board decides, not the text


def test_an_illegal_move_is_reported_and_the_puzzle_goes_on(lichess):
    domain, tasks = lichess
    env = episode(domain, tasks["00sHx"])
    for attempt in ["e2e4", "0000", 42, "Bxe6"]:  # not legal, a pass, not a string, not UCI
        result = env.tools["move"](attempt)
        if result["result"] == "wrong":
            break
        assert result["result"] == "illegal" and "a2e6" in result["legal_moves"]
        assert "legal moves:" in result["message"]
    assert env.illegal == MAX_ILLEGAL_MOVES and result["result"] == "wrong"
    fresh = episode(domain, tasks["00sHx"])
    fresh.tools["move"]("e2e4")
    assert [fresh.tools["move"](m)["result"] for m in ("a2e6", "f7f8")] == ["continue", "solved"]


def test_any_checkmate_solves_even_off_the_line(lichess):
    domain, tasks = lichess
    task = tasks["twoMt"]
    assert task.gold == "a1a8"
    other_mate = episode(domain, task)
    assert other_mate.tools["move"]("b1b8")["result"] == "solved"
    assert other_mate.score(None) == 1.0
    no_mate = episode(domain, task)
    assert no_mate.tools["move"]("a1a7")["result"] == "wrong" and no_mate.score(None) == 0.0


def test_every_rollout_gets_its_own_board(lichess):
    domain, tasks = lichess
    one, two = episode(domain, tasks["00sHx"]), episode(domain, tasks["00sHx"])
    one.tools["move"]("a2e6")
    assert two.tools["observation"]()["last_move"] == "e8d7"


@pytest.mark.parametrize(
    "answer,score",
    [
        ("<move>a2e6</move> then <move>f7f8</move>", 1.0),
        ("<MOVE> a2e6 </MOVE><move>e2e4</move><move>f7f8</move>", 1.0),  # an illegal try in between
        ("<move>a2e6</move>", 0.0),  # half the line
        ("<move>a3b4</move><move>a2e6</move><move>f7f8</move>", 0.0),  # wrong first, then the line
        ("a2e6 f7f8", 0.0),
        ("", 0.0),
        (None, 0.0),  # no tags: no moves
    ],
)
def test_the_domain_scores_an_answer_by_replaying_its_moves(lichess, answer, score):
    domain, tasks = lichess
    assert domain.score(answer, tasks["00sHx"]) == score


def test_a_task_rebuilt_from_its_stored_fields_plays_the_same(lichess):
    domain, tasks = lichess
    stored = json.loads(json.dumps(tasks["00sHx"].public))  # as a rollout row keeps it
    env = domain.episode(Task("00sHx", stored, tasks["00sHx"].gold))
    assert [env.tools["move"](m)["result"] for m in ("a2e6", "f7f8")] == ["continue", "solved"]


# ---------------------------------------------------------------- the seed, for real


def test_the_seed_harness_plays_puzzles_through_the_sandbox(whale_env):
    env = {**whale_env, "WHALE_ROLLOUT_TIMEOUT": "600"}  # three CPU model calls on a busy machine
    out = whale_eval_json(
        REPO / "harness_archive/seeds/chess/seed.py",
        env,
        "--domain",
        "chess",
        "--limit",
        "2",
        "-k",
        "1",
    )
    assert out["n_rollouts"] == 2 and out["mean_turns"] >= 1
    assert set(out["statuses"]) <= {"pass", "fail"}, out  # every rollout ran to its end
    with sqlite3.connect(f"{whale_env['WHALE_HOME']}/whale.db") as db:
        rollouts = db.execute(
            "SELECT id, answer, reward FROM rollout WHERE run_id = ?", (out["run_id"],)
        ).fetchall()
        assert len(rollouts) == 2
        for rollout_id, answer, reward in rollouts:
            steps = db.execute(
                "SELECT kind, tool, response FROM step WHERE rollout_id = ? ORDER BY idx",
                (rollout_id,),
            ).fetchall()
            assert steps[0][:2] == ("tool", "observation")  # the harness looks first
            assert any(kind == "model" for kind, _, _ in steps)
            moves = [json.loads(zlib.decompress(r))["result"] for k, t, r in steps if t == "move"]
            # the answer lists the moves the trace shows, and the reward is the board's verdict
            assert (answer or "").count("<move>") == len(moves)
            assert reward == float(any(m["result"] == "solved" for m in moves))
