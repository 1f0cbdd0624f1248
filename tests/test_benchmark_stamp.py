"""A benchmark section names the commit its figures came from (benchmarks/common.py), read from
git: a tree with changes no commit holds is refused, or with --allow-dirty stamped as such."""

import argparse
import subprocess
import sys

import pytest

from benchmarks.common import parse, report

TITLE = "Some benchmark"


def git(repo, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A committed checkout: a module and a docs/benchmarks.md with an earlier section."""
    monkeypatch.delenv("WHALE_COMMIT", raising=False)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "benchmarks.md").write_text(
        f"# Benchmarks\n\n## {TITLE}\nold stamp\n\nold figures\n\n## Another\nkept\n"
    )
    (tmp_path / "code.py").write_text("X = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "first")
    return tmp_path


def write(repo, **options) -> str:
    page = repo / "docs" / "benchmarks.md"
    report(TITLE, "new figures", "how", path=page, **options)
    return page.read_text()


def test_a_clean_tree_is_stamped_with_its_commit_in_place_of_the_old_section(repo):
    head = git(repo, "rev-parse", "--short", "HEAD")
    text = write(repo, allow_dirty=False)
    stamp = text.split(f"## {TITLE}\n")[1].splitlines()[0]
    assert stamp.endswith(f"; commit {head}"), stamp
    assert "old figures" not in text and "new figures" in text
    assert "## Another\nkept" in text
    # the section it wrote does not make the tree dirty for the next one
    assert f"commit {head}\n" in write(repo, allow_dirty=False)


@pytest.mark.parametrize(
    "change",
    [
        lambda repo: (repo / "code.py").write_text("X = 2\n"),
        lambda repo: (repo / "new_module.py").write_text("Y = 1\n"),
        lambda repo: git(repo, "rm", "-q", "--cached", "code.py"),
    ],
    ids=["edited", "untracked", "staged removal"],
)
def test_a_dirty_tree_is_refused_and_nothing_is_written(repo, change, capsys):
    change(repo)
    before = (repo / "docs" / "benchmarks.md").read_text()
    with pytest.raises(SystemExit, match="changes no commit holds.*--allow-dirty"):
        write(repo, allow_dirty=False)
    assert (repo / "docs" / "benchmarks.md").read_text() == before
    assert "new figures" in capsys.readouterr().out  # printed, so the run is not lost


def test_allow_dirty_stamps_the_section_as_an_uncommitted_tree(repo):
    head = git(repo, "rev-parse", "--short", "HEAD")
    (repo / "code.py").write_text("X = 2\n")
    text = write(repo, allow_dirty=True)
    assert f"commit {head} + uncommitted tree (--allow-dirty)\n" in text


def test_a_script_refuses_a_dirty_tree_before_it_runs(repo, monkeypatch, capsys):
    (repo / "code.py").write_text("X = 2\n")

    def arguments(*argv: str, **options) -> argparse.Namespace:
        monkeypatch.setattr(sys, "argv", ["bench", *argv])
        parser = argparse.ArgumentParser()
        parser.add_argument("--print-only", action="store_true")
        return parse(parser, repo=repo, **options)

    with pytest.raises(SystemExit) as refused:
        arguments()
    assert refused.value.code == 2
    assert "changes no commit holds" in capsys.readouterr().err
    assert arguments("--allow-dirty").allow_dirty
    # a run that writes no section is not refused
    assert arguments("--print-only", stamps=lambda a: not a.print_only).print_only
