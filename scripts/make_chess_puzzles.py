"""Generate the shipped chess puzzle sample, data/chess/puzzles.csv, in Lichess's CSV format.

Games are played from a few well-known openings onwards by a seeded random player that prefers
checks and captures (so games reach tactical positions, as real ones do). After every move of
the game, the position is searched exhaustively with python-chess: when the side to move has a
forced mate in 1 or 2, that move becomes the puzzle's trigger (the opponent's move, first in
`Moves`) and the mating line its solution, as in the Lichess puzzle database.

    .venv/bin/python scripts/make_chess_puzzles.py [--count 400] [--seed 2026] [--out PATH]

The same arguments give the same file, byte for byte.
"""

import argparse
import csv
import random
import sys
from pathlib import Path

import chess

REPO = Path(__file__).resolve().parent.parent
COLUMNS = [
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
]
OPENINGS = {  # Lichess opening tags -> their main line
    "Italian_Game": "e2e4 e7e5 g1f3 b8c6 f1c4 f8c5",
    "Ruy_Lopez": "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6",
    "Sicilian_Defense": "e2e4 c7c5 g1f3 d7d6 d2d4 c5d4 f3d4 g8f6",
    "French_Defense": "e2e4 e7e6 d2d4 d7d5 b1c3 g8f6",
    "Queens_Gambit_Declined": "d2d4 d7d5 c2c4 e7e6 b1c3 g8f6",
    "Kings_Indian_Defense": "d2d4 g8f6 c2c4 g7g6 b1c3 f8g7 e2e4 d7d6",
    "Caro-Kann_Defense": "e2e4 c7c6 d2d4 d7d5 b1c3 d5e4 c3e4",
    "English_Opening": "c2c4 e7e5 b1c3 g8f6 g2g3 d7d5",
}
MAX_GAME_PLIES = 120
# Nominal difficulty (the Lichess database holds Glicko ratings earned from solves, which
# generated puzzles do not have); a high deviation marks it as unplayed.
RATING = {1: 1000, 2: 1500}
THEMES = {1: "mate mateIn1 oneMove", 2: "mate mateIn2 short"}


def mating_moves(board: chess.Board) -> list[chess.Move]:
    """The moves that checkmate at once (only checks can)."""
    mates = []
    for move in board.legal_moves:
        if board.gives_check(move):
            board.push(move)
            if board.is_checkmate():
                mates.append(move)
            board.pop()
    return mates


Line = list[tuple[chess.Move, list[chess.Move]]]  # each reply of the defender, with its mates


def forces_mate_next(board: chess.Board, move: chess.Move) -> Line | None:
    """After `move`, every reply allows a mate in one: [(reply, its mates)], else None."""
    board.push(move)
    try:
        if board.is_game_over():
            return None
        lines = []
        for reply in board.legal_moves:
            board.push(reply)
            mates = mating_moves(board)
            board.pop()
            if not mates:
                return None
            lines.append((reply, mates))
        return lines
    finally:
        board.pop()


def puzzle_line(board: chess.Board) -> list[chess.Move] | None:
    """The solution when the side to move has a forced mate in 1 or 2 with a unique key move.

    Several mates in one are fine (any of them solves, as on Lichess); a mate in two needs a
    single key move, and it must be a check or a capture (the search stays fast); the line
    takes the opponent's reply that leaves the fewest mates, and one of those mates.
    """
    mates = mating_moves(board)
    if mates:
        return [min(mates, key=chess.Move.uci)]
    # Key moves are searched among checks and captures first (few, and the usual keys); only
    # a position with exactly one such key pays for proving that no quiet move mates too.
    forcing, quiet = [], []
    for move in board.legal_moves:
        (forcing if board.is_capture(move) or board.gives_check(move) else quiet).append(move)
    keys = [(move, lines) for move in forcing if (lines := forces_mate_next(board, move))]
    if len(keys) != 1 or any(forces_mate_next(board, move) for move in quiet):
        return None
    key, lines = keys[0]
    reply, finishes = min(lines, key=lambda line: (len(line[1]), line[0].uci()))
    return [key, reply, min(finishes, key=chess.Move.uci)]


def choose_move(board: chess.Board, rng: random.Random) -> chess.Move:
    """A random player with a taste for forcing moves."""
    moves = sorted(board.legal_moves, key=chess.Move.uci)
    forcing = [m for m in moves if board.is_capture(m) or board.gives_check(m)]
    return rng.choice(forcing if forcing and rng.random() < 0.5 else moves)


def puzzles(count: int, seed: int):
    rng = random.Random(seed)
    seen: set[str] = set()
    names = sorted(OPENINGS)
    game = 0
    while len(seen) < count:
        opening = names[game % len(names)]
        game += 1
        board = chess.Board()
        for uci in OPENINGS[opening].split():
            board.push_uci(uci)
        while board.ply() < MAX_GAME_PLIES and not board.is_game_over():
            before = board.fen()
            trigger = choose_move(board, rng)
            board.push(trigger)
            if board.is_game_over():
                break
            line = puzzle_line(board)
            if line is None or before in seen:
                continue
            seen.add(before)
            n = (len(line) + 1) // 2
            yield {
                "PuzzleId": f"w{len(seen):04d}",
                "FEN": before,
                "Moves": " ".join(m.uci() for m in [trigger, *line]),
                "Rating": RATING[n],
                "RatingDeviation": 500,
                "Popularity": 0,
                "NbPlays": 0,
                "Themes": THEMES[n],
                "GameUrl": "",
                "OpeningTags": opening,
            }
            if len(seen) >= count:
                return
            break  # one puzzle per game: the sample spreads over many games


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--out", type=Path, default=REPO / "data" / "chess" / "puzzles.csv")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        writer.writeheader()
        rows = list(puzzles(args.count, args.seed))
        writer.writerows(rows)
    by_theme = {t: sum(r["Themes"] == t for r in rows) for t in THEMES.values()}
    print(f"{len(rows)} puzzles -> {args.out} ({by_theme})", file=sys.stderr)


if __name__ == "__main__":
    main()
