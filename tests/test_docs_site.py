"""The documentation: docs/ builds into a site with `mkdocs build --strict` (mkdocs.yml), and the
README, its front page, points into it.

A warning fails the build: a page left out of the nav, a link to a missing page or anchor, a link
that leaves docs/. The site must also read offline and show the pages' lists as lists."""

import re
import runpy
import subprocess
import sys

import pytest

from tests.conftest import MISSING, REPO

README = REPO / "README.md"
DOCS = REPO / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason=f"{MISSING}mkdocs")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, out


def test_the_site_builds_with_no_warning(site):
    done, out = site
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "WARNING" not in log, log
    # every page of docs/ is a page of the site (one left out of the nav is a warning above)
    for page in DOCS.glob("*.md"):
        assert (out / page.with_suffix(".html").name).is_file(), page.name


def test_the_site_reads_offline(site):
    _, out = site
    for page in out.glob("*.html"):
        html = page.read_text()
        remote = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(?:https?:)?//[^"]+"', html)
        assert not remote, f"{page.name} loads {remote[0]}"


def test_lists_written_for_github_are_lists_on_the_site(site):
    """A list straight after its paragraph, or nested by two spaces, as the pages write them."""
    _, out = site
    for page in out.glob("*.html"):
        for paragraph in re.findall(r"<p>(.*?)</p>", page.read_text(), re.S):
            assert not re.search(r"\n\s*(?:- |\d+\. )\S", paragraph), (page.name, paragraph[:200])
    loop = (out / "loop.html").read_text()
    assert "<li><code>pause</code> finishes the rollouts in flight" in loop


def test_the_hook_leaves_code_blocks_alone():
    hook = runpy.run_path(str(REPO / "scripts" / "mkdocs_hooks.py"))["github_lists"]
    page = "Text:\n- a\n  - b\n    more\n- c\n\n```\nline:\n- not a list\n```\n"
    assert hook(page) == (
        "Text:\n\n- a\n    - b\n        more\n- c\n\n```\nline:\n- not a list\n```\n"
    )


def slug(heading: str) -> str:
    """A heading's anchor as mkdocs (Python-Markdown's toc) and GitHub both make it for the
    headings of these pages."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_the_readme_links_into_the_docs_resolve():
    links = re.findall(r"\]\((docs/[^)#]*)(?:#([^)]*))?\)", README.read_text())
    assert len(links) >= 15
    for path, anchor in links:
        target = REPO / path
        assert target.is_file(), path
        if anchor:
            assert anchor in anchors(target), f"{path}#{anchor}"


def test_the_readme_leads_with_the_two_commands():
    """.ci/run and tests/test_setup_script.py run these two, as a newcomer does."""
    block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S).group(1).splitlines()
    assert [line.split("#")[0].strip() for line in block] == [
        "bash scripts/setup.sh && .venv/bin/whale demo",
        "bash scripts/test.sh",
    ]
    assert len(README.read_text().splitlines()) < 150
