"""Retrieval for searchqa: a passage corpus and the indexes its `search` tool queries.

- The corpus is JSONL in the wiki-18 format of Search-R1 / FlashRAG: one passage a line,
  {"id": ..., "contents": "\"Title\"\\ntext"} ({"id", "title", "text"} is read too); `.gz` files
  are read transparently.
- `BM25Index` (the default): SQLite FTS5 ranked by its bm25(). Built once per corpus into
  `<index dir>/<corpus key>.db` with a progress bar, atomically (a temporary file renamed into
  place), and reused by every later process. Standard library only.
- `DenseIndex` (the paper's): queries embedded as the release's retriever embeds them (Search-R1's
  e5 encoder: "query: " + text, 256 tokens at most, mean pooling, L2-normalised; transformers,
  intfloat/e5-base-v2) and searched with a FAISS index whose row i is corpus line i (Search-R1's
  e5_Flat.index, inner product); the passages' text comes from the BM25 database.
- `PassageCutter`: a passage cut to its first N tokens of a tokenizer, title line included, as
  the release's retrieval server cuts `contents` for `max_doc_tokens`.

Both indexes answer `search(query_list, topk)` with, for each query, a list of
{"id", "title", "text", "score"}, best first.

    python -m app.domains.retrieval CORPUS [INDEX_DIR]   # build the BM25 index ahead of a run
    python -m app.domains.retrieval CORPUS --dense OUT.index [--model intfloat/e5-base-v2]
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from app.progress import err

MAX_TOPK = 20
E5_MODEL = "intfloat/e5-base-v2"  # the release's retriever model
E5_MAX_LENGTH = 256  # the release's retrieval_query_max_length
MAX_QUERIES = 16
MAX_TERMS = 32  # terms of one query that reach the index (a pasted page would be slow, not better)
_CONTENT_HASH_LIMIT = 512 * 2**20  # bigger corpora are keyed by path, size and mtime instead
_INDEX_VERSION = "1"  # bump when the schema or tokenizer changes: old indexes are then rebuilt
# Question words carry no evidence; dropping them keeps OR-queries from matching everything.
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from how in is it of on or that the this to was "
    "were what when where which who whom whose why with".split()
)
_TERM = re.compile(r"[^\W_]+")


class CorpusError(ValueError):
    pass


class RetrieverUnavailable(RuntimeError):
    pass


def open_text(path: Path) -> io.TextIOBase:
    """A text file, gunzipped when its name ends in .gz."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path), encoding="utf-8")
    return open(path, encoding="utf-8")


def parse_passage(row: object, where: str) -> tuple[str, str, str]:
    """(id, title, text) of one corpus row; `where` names the row in the error."""
    if not isinstance(row, dict) or "id" not in row:
        raise CorpusError(f"{where}: a passage must be a JSON object with an 'id'")
    if isinstance(row.get("contents"), str):
        first, newline, rest = row["contents"].partition("\n")
        title, text = (first.strip().strip('"'), rest.strip()) if newline else ("", first.strip())
    elif isinstance(row.get("text"), str):
        title, text = str(row.get("title") or ""), row["text"]
    else:
        raise CorpusError(
            f"{where}: a passage needs 'contents' (wiki-18: '\"Title\"\\ntext') or 'text'"
        )
    return str(row["id"]), title, text


def jsonl_rows(
    lines: Iterable[str], path: Path, error: type[Exception]
) -> Iterator[tuple[str, object]]:
    """("PATH line N", row) for each non-blank line of the JSONL file `path` whose lines these
    are; a line that is not JSON raises `error` naming it."""
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path} line {line_no}: not JSON ({exc.msg})") from None
        yield f"{path} line {line_no}", row


def read_corpus(path: Path) -> Iterator[tuple[str, str, str]]:
    """The passages of a wiki-18 style JSONL file, in order."""
    with open_text(path) as f:
        for where, row in jsonl_rows(f, path, CorpusError):
            yield parse_passage(row, where)


def corpus_key(path: Path) -> str:
    """What identifies a corpus's index: its content hash, or for a huge file (wiki-18 is 13 GB,
    hashing it at every start would cost minutes) its absolute path, size and mtime."""
    stat = path.stat()
    digest = hashlib.sha256(_INDEX_VERSION.encode())
    if stat.st_size <= _CONTENT_HASH_LIMIT:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(2**20), b""):
                digest.update(block)
    else:
        digest.update(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def match_expression(query: str) -> str:
    """An FTS5 MATCH expression for arbitrary text: its words, each quoted (so quotes, AND, *,
    NEAR( and the like are plain words), joined by OR for bm25 to rank. "" when no words."""
    terms = _TERM.findall(query.lower())
    kept = [t for t in terms if t not in STOPWORDS] or terms
    return " OR ".join(f'"{t}"' for t in list(dict.fromkeys(kept))[:MAX_TERMS])


def checked_queries(query_list: object, topk: object) -> tuple[list[str], int]:
    """The queries and topk of a `search` call, or a ValueError a harness author can act on."""
    if isinstance(query_list, str):  # a lone query is a list of one
        query_list = [query_list]
    if not isinstance(query_list, list) or not all(isinstance(q, str) for q in query_list):
        raise ValueError("query_list must be a list of strings")
    if len(query_list) > MAX_QUERIES:
        raise ValueError(f"at most {MAX_QUERIES} queries per call, got {len(query_list)}")
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"topk must be an integer from 1 to {MAX_TOPK}, got {topk!r}")
    return query_list, topk


class BM25Index:
    """A corpus's passages in an SQLite FTS5 table, searched with bm25()."""

    def __init__(self, db_path: Path):
        self.path = db_path
        self._local = threading.local()  # the gateway calls tools from worker threads

    @classmethod
    def open(cls, corpus: Path, index_dir: Path, quiet: bool = False) -> "BM25Index":
        """The corpus's index, built first when no process has built it yet."""
        db_path = index_dir / f"{corpus_key(corpus)}.db"
        if not db_path.exists():
            build_bm25(corpus, db_path, quiet=quiet)
        return cls(db_path)

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True)
            self._local.db = db
        return db

    def __len__(self) -> int:
        return self._db().execute("SELECT count(*) FROM passages").fetchone()[0]

    def passage(self, row: int) -> dict:
        """Corpus line `row` (0-based), for the dense index whose rows are corpus lines."""
        found = (
            self._db()
            .execute("SELECT pid, title, text FROM passages WHERE rowid = ?", (row + 1,))
            .fetchone()
        )
        if found is None:
            raise LookupError(f"no passage {row} in {self.path}")
        return {"id": found[0], "title": found[1], "text": found[2]}

    def search(self, query_list: list[str], topk: int = 3) -> list[list[dict]]:
        queries, topk = checked_queries(query_list, topk)
        return [self._one(q, topk) for q in queries]

    def _one(self, query: str, topk: int) -> list[dict]:
        expression = match_expression(query)
        if not expression:
            return []
        rows = (
            self._db()
            .execute(
                # column weights: pid (unindexed), title counts double, text
                "SELECT pid, title, text, bm25(passages, 0.0, 2.0, 1.0) AS rank FROM passages "
                "WHERE passages MATCH ? ORDER BY rank LIMIT ?",
                (expression, topk),
            )
            .fetchall()
        )
        return [
            {"id": pid, "title": title, "text": text, "score": round(-rank, 4)}
            for pid, title, text, rank in rows
        ]


def build_bm25(corpus: Path, db_path: Path, quiet: bool = False) -> None:
    """Index the corpus into db_path: written to a temporary file, renamed when complete, so a
    crash or a concurrent builder never leaves a half-built index under the final name."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(f"{db_path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    try:
        db.executescript(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
            "CREATE VIRTUAL TABLE passages USING fts5(pid UNINDEXED, title, text,"
            " tokenize='porter unicode61');"
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
        )
        size = corpus.stat().st_size
        progress = Progress(
            TextColumn(f"[bold]indexing {corpus.name}"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=err,
            disable=quiet,
        )
        insert = "INSERT INTO passages(rowid, pid, title, text) VALUES (?, ?, ?, ?)"
        with progress, open(corpus, "rb") as raw:
            bar = progress.add_task("", total=size)
            text = io.TextIOWrapper(
                gzip.GzipFile(fileobj=raw) if corpus.suffix == ".gz" else raw, encoding="utf-8"
            )
            batch, count = [], 0
            for where, row in jsonl_rows(text, corpus, CorpusError):
                count += 1  # rowid = passage number, so FAISS row i is rowid i + 1
                batch.append((count, *parse_passage(row, where)))
                if len(batch) == 10_000:
                    db.executemany(insert, batch)
                    batch.clear()
                    progress.update(bar, completed=raw.tell())
            db.executemany(insert, batch)
            progress.update(bar, completed=size)
        if count == 0:
            raise CorpusError(f"{corpus}: no passages")
        db.execute("INSERT INTO passages(passages) VALUES ('optimize')")
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [
                ("corpus", str(corpus.resolve())),
                ("passages", str(count)),
                ("version", _INDEX_VERSION),
            ],
        )
        db.commit()
        db.close()
        os.replace(tmp, db_path)
    except BaseException:
        db.close()
        tmp.unlink(missing_ok=True)
        raise


def _passage_text(title: str, text: str) -> str:
    """A passage as wiki-18's `contents`: the quoted title, a newline, the text."""
    return f'"{title}"\n{text}' if title else text


class E5Encoder:
    """Texts embedded as Search-R1's retriever embeds them with e5: a "query: " or "passage: "
    prefix, at most 256 tokens, the mean of the last hidden states over the attention mask,
    L2-normalised; fp16 on a GPU. Any transformers encoder loads (a hub id or a local folder)."""

    def __init__(self, model: str = E5_MODEL, max_length: int = E5_MAX_LENGTH):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        if self.tokenizer.pad_token is None:  # decoder tokenizers have none; masked out anyway
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModel.from_pretrained(model).eval()
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda":
            self.model = self.model.half().to(self.device)
        self.max_length = max_length

    def encode(self, texts: list[str], prefix: str = "query: ") -> "numpy.ndarray":  # noqa: F821
        batch = self.tokenizer(
            [prefix + t for t in texts],
            max_length=self.max_length,
            padding=True,
            truncation=True,
            return_tensors="pt",
        ).to(self.device)
        with self.torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1)
        pooled = self.torch.nn.functional.normalize(pooled.float(), dim=-1)
        return pooled.cpu().numpy().astype("float32")


def _faiss():
    try:
        import faiss
    except ImportError as exc:
        raise RetrieverUnavailable(
            f"the dense retriever needs faiss ({exc}); pip install faiss-cpu (or faiss-gpu), or "
            "use the default BM25 retriever (WHALE_SEARCHQA_RETRIEVER=bm25)"
        ) from exc
    return faiss


class DenseIndex:
    """The paper's retriever: an e5 query encoder and a FAISS index over the corpus (row i =
    corpus line i, as Search-R1's e5_Flat.index is built), best inner product first."""

    def __init__(
        self,
        passages: BM25Index,
        faiss_index: Path,
        model: str = E5_MODEL,
        encoder: E5Encoder | None = None,
    ):
        faiss = _faiss()
        if not faiss_index.is_file():
            raise RetrieverUnavailable(f"no FAISS index at {faiss_index}")
        self.passages = passages
        self.index = faiss.read_index(str(faiss_index))
        if self.index.ntotal != len(passages):
            raise RetrieverUnavailable(
                f"{faiss_index} holds {self.index.ntotal} vectors, the corpus "
                f"{len(passages)} passages: it was built from another corpus"
            )
        self.encoder = encoder or E5Encoder(model)
        if self.index.d != self.encoder.model.config.hidden_size:
            raise RetrieverUnavailable(
                f"{faiss_index} holds {self.index.d}-dimensional vectors, {model} makes "
                f"{self.encoder.model.config.hidden_size}: it was built with another model"
            )
        self._lock = threading.Lock()  # one encoder, many gateway threads

    def search(self, query_list: list[str], topk: int = 3) -> list[list[dict]]:
        queries, topk = checked_queries(query_list, topk)
        if not queries:
            return []
        with self._lock:
            scores, rows = self.index.search(self.encoder.encode(queries), topk)
        return [
            [
                {**self.passages.passage(int(r)), "score": round(float(s), 4)}
                for s, r in zip(row_scores, row_ids)
                if r >= 0
            ]
            for row_scores, row_ids in zip(scores, rows)
        ]


def build_dense_index(
    corpus: Path, out: Path, encoder: E5Encoder, batch_size: int = 64, quiet: bool = False
) -> int:
    """A flat inner-product FAISS index of the corpus's passages ("passage: " + contents, as
    Search-R1's index builder embeds them for e5), row i = corpus line i, written atomically.
    For a small corpus; wiki-18's e5_Flat.index is better downloaded than rebuilt."""
    faiss = _faiss()
    index = faiss.IndexFlatIP(encoder.model.config.hidden_size)
    progress = Progress(
        TextColumn(f"[bold]embedding {corpus.name}"), BarColumn(), console=err, disable=quiet
    )
    with progress:
        bar = progress.add_task("", total=None)
        batch: list[str] = []
        for _, title, text in read_corpus(corpus):
            batch.append(_passage_text(title, text))
            if len(batch) == batch_size:
                index.add(encoder.encode(batch, prefix="passage: "))
                progress.update(bar, advance=len(batch))
                batch.clear()
        if batch:
            index.add(encoder.encode(batch, prefix="passage: "))
    if index.ntotal == 0:
        raise CorpusError(f"{corpus}: no passages")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, out)
    return index.ntotal


class PassageCutter:
    """Cuts a passage to its first N tokens, the quoted title line counted, as the release's
    retrieval server cuts `contents` for `max_doc_tokens` (tokens of `tokenizer`, the policy's
    there: encode without special tokens, decode the first N); with no tokenizer, N words."""

    def __init__(self, tokenizer: str | None = None):
        self.name = tokenizer
        self._tokenizer = None
        self._lock = threading.Lock()

    def _load(self):
        with self._lock:
            if self._tokenizer is None:
                from transformers import AutoTokenizer

                try:
                    self._tokenizer = AutoTokenizer.from_pretrained(self.name)
                except Exception as exc:  # noqa: BLE001 - offline, no such model: say which
                    raise RetrieverUnavailable(
                        f"the passage tokenizer {self.name!r} could not be loaded: "
                        f"{type(exc).__name__}: {exc}"
                    ) from None
        return self._tokenizer

    def cut(self, passage: dict, max_tokens: int) -> dict:
        title, text = passage["title"], passage["text"]
        if self.name is None:
            if len(_passage_text(title, text).split()) <= max_tokens:
                return passage
            head = len(_passage_text(title, "").split())  # the title line's words
            return {**passage, "text": " ".join(text.split()[: max(0, max_tokens - head)])}
        tokenizer = self._load()
        ids = tokenizer.encode(_passage_text(title, text), add_special_tokens=False)
        if len(ids) <= max_tokens:
            return passage
        cut = tokenizer.decode(ids[:max_tokens])
        if not title:
            return {**passage, "text": cut}
        first, _, rest = cut.partition("\n")  # the cut may end inside the title line
        return {**passage, "title": first.strip().strip('"'), "text": rest}


if __name__ == "__main__":
    from app.config import Settings

    parser = argparse.ArgumentParser(prog="python -m app.domains.retrieval")
    parser.add_argument("corpus", type=Path)
    parser.add_argument("index_dir", type=Path, nargs="?", help="default: $WHALE_HOME/indexes")
    parser.add_argument("--dense", type=Path, metavar="OUT", help="also embed it into a FAISS file")
    parser.add_argument("--model", default=E5_MODEL, help="the encoder for --dense")
    args = parser.parse_args()
    index = BM25Index.open(args.corpus, args.index_dir or Settings().home / "indexes")
    print(f"{index.path}: {len(index)} passages")
    if args.dense:
        count = build_dense_index(args.corpus, args.dense, E5Encoder(args.model))
        print(f"{args.dense}: {count} vectors")
