"""Every fenced ```python block of README.md and docs/**/*.md runs as written.

Each block is written to ``snippet.py`` in an empty temporary directory and run there with this
interpreter, in its own process (``__name__ == "__main__"``, so multiprocessing's start methods see
a real script), with a timeout; it must exit 0. The directory holds a link ``examples`` to the
repository's examples/, as the root of a clone would. Fashion-MNIST is read from
/usr/share/datasets/fashion-mnist (``make data``; CI installs it).

Markers, an HTML comment on the line before the block's opening fence (invisible when rendered):

``<!-- snippet: skip (REASON) -->``
    The block is not run; REASON (required) says what it needs that the test cannot give: a GPU, a
    cluster, a file the test cannot make (pretrained weights, a data set that is not installed).
    Skips are reported with their reason (``pytest -rs``).
``<!-- snippet: continues -->``
    The block continues the page's previous block: it runs after that block's code (and whatever
    that one continues), in one script, as a reader who runs them in order would.

Anything else -- a fragment that needs a ``loader`` or ``model`` defined elsewhere, ``...`` for
arguments -- is a failure: make the block small and complete (tiny data, an epoch, seconds), still
true.

"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TIMEOUT_S = 180
OPEN_FENCE = re.compile(r"^```python\s*$")
CLOSE_FENCE = re.compile(r"^```\s*$")
MARKER = re.compile(r"^<!--\s*snippet:\s*(?P<kind>[a-z]+)\s*(?:\((?P<reason>.*)\))?\s*-->\s*$")
BAD_MARKER = "{where}: unknown snippet marker {line!r}: use <!-- snippet: skip (REASON) --> or <!-- snippet: continues -->"
NO_REASON = "{where}: <!-- snippet: skip --> needs a reason in parentheses: <!-- snippet: skip (REASON) -->"
NOTHING_TO_CONTINUE = "{where}: <!-- snippet: continues --> but no earlier python block on the page"


@dataclass(frozen=True)
class Snippet:
    where: str  # page:line of the opening fence (1-based), the page relative to the repository
    code: str  # with the code of the blocks it continues
    skip: str | None


def page_snippets(page: Path, root: Path = ROOT) -> list[Snippet]:
    """The python blocks of ``page``, in order, with their markers applied."""
    lines = page.read_text(encoding="utf-8").splitlines()
    snippets: list[Snippet] = []
    number = 0
    while number < len(lines):
        if not OPEN_FENCE.match(lines[number]):
            number += 1
            continue
        start = number
        number += 1
        body: list[str] = []
        while number < len(lines) and not CLOSE_FENCE.match(lines[number]):
            body.append(lines[number])
            number += 1
        number += 1
        where = f"{page.relative_to(root)}:{start + 1}"
        previous = next((line for line in reversed(lines[:start]) if line.strip()), "")
        code, skip = "\n".join(body) + "\n", None
        marker = MARKER.match(previous.strip())
        if marker is None and previous.strip().startswith("<!-- snippet"):
            raise AssertionError(BAD_MARKER.format(where=where, line=previous))
        if marker is not None:
            if marker["kind"] == "skip":
                if not (marker["reason"] or "").strip():
                    raise AssertionError(NO_REASON.format(where=where))
                skip = marker["reason"].strip()
            elif marker["kind"] == "continues":
                if not snippets:
                    raise AssertionError(NOTHING_TO_CONTINUE.format(where=where))
                code = snippets[-1].code + "\n" + code
            else:
                raise AssertionError(BAD_MARKER.format(where=where, line=previous))
        snippets.append(Snippet(where, code, skip))
    return snippets


SNIPPETS = [snippet for page in PAGES for snippet in page_snippets(page)]


def test_snippets_were_found() -> None:
    # The collection itself can fail: README's quick start and docs/sweeps.md's example are in it.
    wheres = {snippet.where.split(":")[0] for snippet in SNIPPETS}
    assert {"README.md", "docs/sweeps.md", "docs/report.md"} <= wheres


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[snippet.where for snippet in SNIPPETS])
def test_snippet_runs_as_written(snippet: Snippet, tmp_path: Path) -> None:
    if snippet.skip is not None:
        pytest.skip(f"{snippet.where}: {snippet.skip}")
    (tmp_path / "snippet.py").write_text(snippet.code, encoding="utf-8")
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    env = {**os.environ, "MPLBACKEND": "Agg"}
    try:
        done = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{snippet.where}: still running after {TIMEOUT_S} s; make the example smaller")
    assert done.returncode == 0, f"{snippet.where} failed (exit {done.returncode}):\n{done.stderr[-3000:]}"


def test_markers_are_read(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n\n<!-- snippet: continues -->\n```python\nprint(x)\n```\n\n"
        "<!-- snippet: skip (needs a GPU) -->\n```python\nimport cuda_only\n```\n```bash\nls\n```\n",
        encoding="utf-8",
    )
    first, second, third = page_snippets(page, tmp_path)
    assert first == Snippet("page.md:1", "x = 1\n", None)
    assert second == Snippet("page.md:6", "x = 1\n\nprint(x)\n", None)
    assert third == Snippet("page.md:11", "import cuda_only\n", "needs a GPU")
    page.write_text("<!-- snippet: skip -->\n```python\npass\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="needs a reason"):
        page_snippets(page, tmp_path)
    page.write_text("<!-- snippet: skipp (typo) -->\n```python\npass\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="unknown snippet marker"):
        page_snippets(page, tmp_path)
    page.write_text("<!-- snippet: continues -->\n```python\npass\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="no earlier python block"):
        page_snippets(page, tmp_path)
