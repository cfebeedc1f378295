"""Every relative link of README.md and docs/*.md resolves: the file exists in the repository, and a
#anchor names a heading of the Markdown file it points into (GitHub's anchors). Links to other sites
are not fetched (the tests run offline)."""

from __future__ import annotations

from doclib import anchors, blocks, broken_links, section, shell_blocks, slug
from testkit.models import REPO

DOCS = ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]


def test_every_relative_link_resolves():
    broken = [b for doc in DOCS for b in broken_links(REPO / doc, REPO)]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_links_every_document_in_docs():
    readme = (REPO / "README.md").read_text()
    unlinked = [doc for doc in DOCS[1:] if f"]({doc})" not in readme]
    assert not unlinked, f"docs not linked from the README: {unlinked}"


def test_the_readme_stays_a_front_door():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200, "README.md over 200 lines: move detail to docs/"


# --- the checks themselves can fail -------------------------------------------------------------------


def test_broken_files_and_anchors_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## The `nbl eval` command: tasks\n\n## Twice\n\n## Twice\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md#the-nbl-eval-command-tasks) [ok2](docs/a.md#twice-1) [ok3](#top) [web](https://x.org/a)\n"
        "[no file](docs/b.md) [no anchor](docs/a.md#nope) [out](../elsewhere.md) ![img](docs/pic.png)\n"
        "`[in code](docs/none.md)`\n\n```\n[in a block](docs/none.md)\n```\n\n# Top\n"
    )
    found = broken_links(tmp_path / "README.md", tmp_path)
    assert [f.split(": ", 1)[1] for f in found] == [
        "docs/b.md (no such file)",
        "docs/a.md#nope (no heading #nope in a.md)",
        "../elsewhere.md (outside the repository)",
        "docs/pic.png (no such file)",
    ]


def test_github_slugs():
    assert slug("`nbl submit`, `wait`, `jobs`, `cancel`, `logs`") == "nbl-submit-wait-jobs-cancel-logs"
    assert slug("The web dashboard: `/ui`") == "the-web-dashboard-ui"
    assert slug("A job's evaluation") == "a-jobs-evaluation"
    assert slug("Sizing: `nbl estimate`, `POST /v1/estimates`") == "sizing-nbl-estimate-post-v1estimates"
    assert anchors("# X\n```\n# not a heading\n```\n## X\n") == {"x", "x-1"}


def test_quick_start_blocks_are_read_in_order_and_untagged_ones_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(
        "# T\n## Quick start\n```bash\necho 1\n```\nsome text\n```text\nout\n```\n"
        "### Sub\n```sh\necho 2\n```\n## Next\n```bash\necho 3\n```\n"
    )
    assert [b.text for b in shell_blocks(readme, "Quick start")] == ["echo 1\n", "echo 2\n"]
    first, body = section(readme.read_text(), "Next")
    assert [(b.lang, b.line) for b in blocks(body, first)] == [("bash", 15)]
    readme.write_text("## Quick start\n```\necho untagged\n```\n")
    try:
        shell_blocks(readme, "Quick start")
    except ValueError as e:
        assert "line 2" in str(e)
    else:
        raise AssertionError("an untagged block in the quick start was accepted")
