"""chess: puzzles from the Lichess puzzle database, played move by move against the line.

A puzzle file is Lichess's CSV (PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,
Themes,GameUrl,OpeningTags), plain, .gz or .zst, with the header row of current dumps or
without it (older dumps). `FEN` is the position *before* the opponent's move that sets the
puzzle up: the first move of `Moves` is that trigger, applied before the model plays; the rest
is the solution, the solver's moves alternating with the opponent's replies.

The domain is named "chess"; the module is not, so that `import chess` here is python-chess.
"""

import csv
import gzip
import hashlib
import io
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chess

from app import ROOT
from app.domains import SKILLS, SPLITS, Task

SAMPLE = ROOT / "data" / "chess" / "puzzles.csv"
PUZZLES_ENV = "WHALE_CHESS_PUZZLES"
COLUMNS = (
    "PuzzleId",
    "FEN",
    "Moves",
    "Rating",
    "RatingDeviation",
    "Popularity",
    "NbPlays",
    "Themes",
    "GameUrl",
    "OpeningTags",
)
REQUIRED = ("PuzzleId", "FEN", "Moves")
# The release's builder (domains/chess_puzzles/autoharness_chess_puzzle/grpo_dataset.py at
# krafton-ai/WHALE 7d5a422a): 16,384 train, 256 harness ("mh_val") and a test pool of 1,024,
# seed 42; the paper evaluates 256 puzzles of that pool.
SPLIT_SIZES = {"train": 16384, "harness": 256, "test": 1024}
SPLIT_SEED = 42
TEST_TASKS = 256
SAMPLE_SIZES = {"train": 256, "harness": 64, "test": 64}  # the 400-puzzle shipped sample
MAX_SOLUTION_PLIES = 9  # the paper keeps puzzles with 1-9 ply solutions
MAX_ILLEGAL_MOVES = 3  # illegal attempts a rollout may make before the puzzle counts as failed
_MOVE_TAG = re.compile(r"<move>\s*([^<\s]+)\s*</move>", re.IGNORECASE)
# The release's rules (scoring "paper"): domains/chess_puzzles/autoharness_chess_puzzle/runner.py
# (normalize_uci, verify_and_step) at krafton-ai/WHALE 7d5a422a.
PAPER_UCI = re.compile(r"\b([a-h][1-8][a-h][1-8][qrbn]?)\b", re.IGNORECASE)
PAPER_FORMAT_RETRIES = 1  # per puzzle: a move that is not one UCI move
PAPER_ILLEGAL_RETRIES = 1  # per puzzle: a UCI move that is not legal here
PAPER_MAX_TURNS = 9  # move attempts, retries included


_PAPER_PATTERNS = (  # runner.parse_model_action, tried in order
    re.compile(r"<move>\s*([a-h][1-8][a-h][1-8][qrbn]?)\s*</move>", re.IGNORECASE),
    re.compile(r"\[\s*([a-h][1-8][a-h][1-8][qrbn]?)\s*\]", re.IGNORECASE),
    PAPER_UCI,
)


def paper_uci(response: Any) -> str:
    """The move the release reads from a reply: parse_model_action (the first pattern that
    matches decides; two different moves there are no move), then normalize_uci."""
    text = str(response or "")
    parsed = "__no_move__"
    for pattern in _PAPER_PATTERNS:
        moves = list(dict.fromkeys(m.group(1).lower() for m in pattern.finditer(text)))
        if moves:
            parsed = moves[0] if len(moves) == 1 else "__ambiguous_multiple_moves__"
            break
    found = PAPER_UCI.search(parsed.strip().lower())
    return found.group(1).lower() if found else parsed.strip().lower()


class PuzzleFileError(ValueError):
    """A puzzle file that cannot be read; the message names the file, line and puzzle."""


@dataclass(frozen=True)
class Puzzle:
    id: str
    fen: str  # before the trigger
    moves: tuple[str, ...]  # the trigger, then the solution
    rating: int | None
    themes: tuple[str, ...]
    line: int  # where it is in the file, for error messages


# ---------------------------------------------------------------- reading the file


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".zst":  # how Lichess distributes the database
        import zstandard

        stream = zstandard.ZstdDecompressor().stream_reader(path.open("rb"), closefd=True)
        return io.TextIOWrapper(stream, encoding="utf-8", newline="")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def read_puzzles(path: Path) -> Iterator[Puzzle]:
    """The file's puzzles with a 1-9 ply solution, checked for shape but not yet for chess
    (that costs a board per puzzle; `checked` does it for the puzzles actually used)."""
    with _open_text(path) as f:
        reader = csv.reader(f)
        columns: tuple[str, ...] | None = None
        for row in reader:
            if not row or not any(cell.strip() for cell in row):
                continue
            if columns is None:
                if row[0].strip() == "PuzzleId":  # current dumps start with a header row
                    columns = tuple(cell.strip() for cell in row)
                    missing = [c for c in REQUIRED if c not in columns]
                    if missing:
                        raise PuzzleFileError(f"{path}: line 1: header lacks {', '.join(missing)}")
                    continue
                columns = COLUMNS  # older dumps have none: Lichess's column order
            yield from _puzzle(path, reader.line_num, row, columns)


def _puzzle(path: Path, line: int, row: list[str], columns: tuple[str, ...]) -> Iterator[Puzzle]:
    puzzle_id = row[0].strip()
    where = f"{path}: line {line} (puzzle {puzzle_id or '?'})"
    # Dumps without a header come with or without the last column (OpeningTags).
    expected = {len(columns)} if columns is not COLUMNS else {len(COLUMNS) - 1, len(COLUMNS)}
    if len(row) not in expected:
        want = " or ".join(str(n) for n in sorted(expected))
        raise PuzzleFileError(f"{where}: {len(row)} columns, expected {want}")
    cells = {name: value.strip() for name, value in zip(columns, row)}
    for name in REQUIRED:
        if not cells[name]:
            raise PuzzleFileError(f"{where}: empty {name}")
    moves = tuple(cells["Moves"].split())
    plies = len(moves) - 1
    if plies < 1 or plies % 2 == 0:
        raise PuzzleFileError(
            f"{where}: Moves must be the trigger and a solution ending with "
            f"the solver's move, got {len(moves)} moves"
        )
    if plies > MAX_SOLUTION_PLIES:
        return
    rating = cells.get("Rating") or None
    if rating is not None and not rating.lstrip("-").isdigit():
        raise PuzzleFileError(f"{where}: Rating {rating!r} is not a whole number")
    yield Puzzle(
        puzzle_id,
        cells["FEN"],
        moves,
        None if rating is None else int(rating),
        tuple(cells.get("Themes", "").split()),
        line,
    )


def checked(path: Path, puzzle: Puzzle) -> chess.Board:
    """The board after the trigger; raises PuzzleFileError naming the puzzle when the FEN is
    not a legal position or a move of the line is not legal."""
    where = f"{path}: line {puzzle.line} (puzzle {puzzle.id})"
    try:
        board = chess.Board(puzzle.fen)
    except ValueError as exc:
        raise PuzzleFileError(f"{where}: bad FEN {puzzle.fen!r}: {exc}") from None
    if not board.is_valid():
        raise PuzzleFileError(
            f"{where}: FEN {puzzle.fen!r} is not a legal position ({board.status()!r})"
        )
    after_trigger = None
    for i, uci in enumerate(puzzle.moves):
        try:
            board.push(board.parse_uci(uci))
        except ValueError as exc:
            raise PuzzleFileError(
                f"{where}: move {i + 1} of Moves, {uci!r}, is not legal in {board.fen()!r}: {exc}"
            ) from None
        if after_trigger is None:
            after_trigger = board.copy(stack=False)
    return after_trigger


# ---------------------------------------------------------------- splits


def position_key(board: chess.Board) -> str:
    """What makes two puzzles the same: the position the solver faces (piece placement and side
    to move, without castling, en passant or clocks), as the release deduplicates."""
    placement, side = board.fen().split()[:2]
    return f"{placement} {side}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def bucket_of(key: str, sizes: dict[str, int], seed: int = SPLIT_SEED) -> str:
    """The split a position hashes to, as the release computes it: sha256 of sha256 of
    "<position key>:<seed>", its first 12 hex digits modulo the sum of the sizes, cut into
    harness, test and train ranges in that order."""
    bucket = int(_sha256(_sha256(f"{key}:{seed}"))[:12], 16) % sum(sizes.values())
    for split in ("harness", "test", "train"):
        if bucket < sizes[split]:
            return split
        bucket -= sizes[split]
    return "train"


def select(
    path: Path, puzzles: Iterator[Puzzle], sizes: dict[str, int], seed: int = SPLIT_SEED
) -> dict[str, list[tuple[Puzzle, chess.Board]]]:
    """The release's split, in file order: a puzzle whose position an earlier one already
    had is skipped; the others go to the split their position hashes to, or, when that one is
    full, to the first of harness, test, train that is not; reading stops once all are full.
    Each puzzle comes with its board after the trigger. A file too small to fill the sizes gives
    smaller splits (the release refuses it)."""
    chosen: dict[str, list[tuple[Puzzle, chess.Board]]] = {s: [] for s in SPLITS}
    positions: set[str] = set()
    lines: dict[str, int] = {}  # PuzzleId -> its line: a repeated id is a broken file
    for puzzle in puzzles:
        if puzzle.id in lines:
            raise PuzzleFileError(
                f"{path}: line {puzzle.line} (puzzle {puzzle.id}): the same PuzzleId as "
                f"line {lines[puzzle.id]}"
            )
        lines[puzzle.id] = puzzle.line
        board = checked(path, puzzle)
        key = position_key(board)
        if key in positions:
            continue
        split = bucket_of(key, sizes, seed)
        if len(chosen[split]) >= sizes[split]:
            split = next(s for s in ("harness", "test", "train") if len(chosen[s]) < sizes[s])
        positions.add(key)
        chosen[split].append((puzzle, board))
        if all(len(chosen[s]) >= sizes[s] for s in SPLITS):
            break
    return chosen


def _task(puzzle: Puzzle, board: chess.Board) -> Task:
    public = {
        "puzzle_id": puzzle.id,
        "fen": board.fen(),  # after the trigger: the solver is to move
        "trigger": puzzle.moves[0],
        "side_to_move": "white" if board.turn == chess.WHITE else "black",
        "rating": puzzle.rating,
        "themes": list(puzzle.themes),
    }
    return Task(puzzle.id, public, " ".join(puzzle.moves[1:]))


# ---------------------------------------------------------------- one rollout


@dataclass
class PuzzleEpisode:
    """One rollout's board: the solver plays the line's moves, the episode answers with the
    opponent's replies. Under `lenient` rules a legal move off the line ends the puzzle as
    failed, except a move that checkmates, which solves it (Lichess's rule: a mate cannot be
    improved on), and an illegal move is reported with the legal ones and changes nothing, up to
    MAX_ILLEGAL_MOVES of them. Under `paper` rules (the release's) only the line's move counts,
    one malformed and one illegal move are forgiven per puzzle, and at most PAPER_MAX_TURNS
    moves are tried."""

    board: chess.Board  # after the trigger
    line: list[chess.Move]
    trigger: str
    played: int = 0  # plies of the line on the board
    state: str = "continue"  # continue | solved | wrong
    illegal: int = 0
    rules: str = "lenient"  # or "paper"
    malformed: int = 0  # paper: moves that were not one UCI move
    attempts: int = 0  # paper: move calls
    tools: dict[str, Callable[..., Any]] = field(init=False)

    def __post_init__(self):
        self.tools = {"observation": self.observation, "move": self.move}

    @classmethod
    def of(cls, task: Task, rules: str = "lenient") -> "PuzzleEpisode":
        board = chess.Board(task.public["fen"])
        line = []
        for uci in task.gold.split():  # parsed on a scratch board: castling notations agree
            line.append(board.parse_uci(uci))
            board.push(line[-1])
        return cls(chess.Board(task.public["fen"]), line, task.public["trigger"], rules=rules)

    def observation(self) -> dict[str, Any]:
        """The position: FEN, an ASCII board (White in capitals, rank 8 on top), the side to
        move, the last move played, the legal moves in UCI, the same moves in SAN (in the same
        order: the sandbox has no python-chess to name them), and the puzzle's state."""
        legal = sorted(self.board.legal_moves, key=lambda m: m.uci())
        return {
            "fen": self.board.fen(),
            "board": str(self.board),
            "side_to_move": "white" if self.board.turn == chess.WHITE else "black",
            "last_move": self.board.peek().uci() if self.board.move_stack else self.trigger,
            "legal_moves": [m.uci() for m in legal],
            "legal_moves_san": [self.board.san(m) for m in legal],
            "state": self.state,
        }

    def move(self, uci: str) -> dict[str, Any]:
        """Play one move in UCI (e.g. "e2e4", "e7e8q"). result: "continue" (with the
        opponent's reply), "solved", "wrong" (the puzzle is over), "illegal" (try again) or
        "over" (the puzzle had already ended)."""
        if self.state != "continue":
            return {"result": "over", "message": f"the puzzle is over ({self.state})"}
        if self.rules == "paper":
            return self._paper_move(uci)
        try:
            played = self.board.parse_uci(str(uci).strip())
        except ValueError:
            return self._illegal(uci)
        if not played:  # "0000", the null move: passing is not a chess move
            return self._illegal(uci)
        if played != self.line[self.played] and not self._mates(played):
            return self._wrong(played)
        return self._advance(played)

    def _paper_move(self, action: Any) -> dict[str, Any]:
        """verify_and_step, in its order: format, legality, then the line's move only."""
        self.attempts += 1
        if self.attempts > PAPER_MAX_TURNS:
            self.state = "wrong"
            return {"result": "wrong", "message": f"more than {PAPER_MAX_TURNS} moves tried"}
        parsed = paper_uci(action)
        move = None
        if re.fullmatch(r"[a-h][1-8][a-h][1-8][qrbn]?", parsed):
            try:
                move = chess.Move.from_uci(parsed)
            except ValueError:
                move = None
        if move is None:
            self.malformed += 1
            if self.malformed > PAPER_FORMAT_RETRIES:
                self.state = "wrong"
                return {"result": "wrong", "message": f"{parsed!r} is not a UCI move: malformed"}
            return {
                "result": "illegal",
                "message": f'The verifier could not parse exactly one UCI move from "{parsed}". '
                "Reply with exactly one move, e.g. <move>e2e4</move>, and no explanation.",
            }
        # the board's legal moves as UCI strings, as the release's harness lists them: king
        # takes rook (e1h1) is not castling here
        if parsed not in {m.uci() for m in self.board.legal_moves}:
            self.illegal += 1
            if self.illegal > PAPER_ILLEGAL_RETRIES:
                self.state = "wrong"
                return {"result": "wrong", "message": f"{parsed} is not legal here: illegal"}
            legal = sorted(m.uci() for m in self.board.legal_moves)
            return {
                "result": "illegal",
                "legal_moves": legal,
                "message": f'The parsed move "{parsed}" is not legal in the current board. '
                "Choose one move from the visible legal moves and reply only as <move>uci</move>.",
            }
        if parsed != self.line[self.played].uci():
            return self._wrong(move)
        return self._advance(move)

    def _wrong(self, played: chess.Move) -> dict[str, Any]:
        self.board.push(played)
        self.state = "wrong"
        return {
            "result": "wrong",
            "message": f"{played.uci()} is not the solution; the puzzle is over",
        }

    def _advance(self, played: chess.Move) -> dict[str, Any]:
        """Play the line's move (or a mate) and the opponent's reply."""
        self.board.push(played)
        self.played += 1
        if self.played == len(self.line) or self.board.is_checkmate():
            self.state = "solved"
            return {"result": "solved", "message": "puzzle solved"}
        reply = self.line[self.played]
        reply_san = self.board.san(reply)
        self.board.push(reply)
        self.played += 1
        return {
            "result": "continue",
            "opponent_move": reply.uci(),
            "opponent_move_san": reply_san,
            **self.observation(),
        }

    def _mates(self, move: chess.Move) -> bool:
        self.board.push(move)
        try:
            return self.board.is_checkmate()
        finally:
            self.board.pop()

    def _illegal(self, uci: Any) -> dict[str, Any]:
        self.illegal += 1
        legal = sorted(m.uci() for m in self.board.legal_moves)
        if self.illegal >= MAX_ILLEGAL_MOVES:
            self.state = "wrong"
            return {
                "result": "wrong",
                "message": f"{uci!r} is not a legal move either: "
                f"{MAX_ILLEGAL_MOVES} illegal moves end the puzzle",
            }
        message = f"{uci!r} is not a legal move here; legal moves: {' '.join(legal)}"
        return {"result": "illegal", "legal_moves": legal, "message": message}

    def score(self, answer: str | None) -> float:
        """1.0 only when the whole line was played on this board; the answer text is not
        needed (the moves were made through the tool)."""
        return float(self.state == "solved")


# ---------------------------------------------------------------- the domain


class ChessPuzzles:
    name = "chess"
    # The tools keep a board per rollout (episode); these are their names and signatures.
    tools: dict[str, Callable[..., Any]] = {
        "observation": PuzzleEpisode.observation,
        "move": PuzzleEpisode.move,
    }
    forbidden_modules = frozenset({"subprocess", "multiprocessing", "ctypes"})  # no engines
    seed_harness = ROOT / "harness_archive" / "seeds" / "chess" / "seed.py"
    skill = SKILLS / "chess.md"
    scorings = ("lenient", "paper")

    def __init__(
        self,
        path: str | Path | None = None,
        sizes: dict[str, int] | None = None,
        test_tasks: int = TEST_TASKS,
    ):
        self.path = Path(path or os.environ.get(PUZZLES_ENV) or SAMPLE)
        if not self.path.is_file():
            raise PuzzleFileError(
                f"{self.path}: no such puzzle file (set {PUZZLES_ENV} to the "
                f"Lichess CSV, e.g. lichess_db_puzzle.csv.zst)"
            )
        sizes = sizes or (SAMPLE_SIZES if self.path == SAMPLE else SPLIT_SIZES)
        if set(sizes) != set(SPLITS) or any(n < 1 for n in sizes.values()):
            raise ValueError(f"sizes must give each of {', '.join(SPLITS)} at least 1 puzzle")
        chosen = select(self.path, read_puzzles(self.path), sizes)
        chosen["test"] = chosen["test"][:test_tasks]  # the first of the pool, in file order
        self._splits = {s: [_task(p, board) for p, board in chosen[s]] for s in SPLITS}

    def tasks(self, split: str) -> list[Task]:
        if split not in self._splits:
            raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
        return self._splits[split]

    def episode(self, task: Task, scoring: str = "lenient") -> PuzzleEpisode:
        return PuzzleEpisode.of(task, scoring)

    def score(self, answer: str | None, task: Task, scoring: str = "lenient") -> float:
        """The moves of the answer's <move>uci</move> tags, replayed in order on a fresh board
        by the episode's rules."""
        episode = self.episode(task, scoring)
        for uci in _MOVE_TAG.findall(answer or ""):
            if episode.move(uci)["result"] in ("solved", "wrong", "over"):
                break
        return episode.score(answer)
