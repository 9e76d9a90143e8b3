"""The documentation's links resolve, and the manual's pages stay short.

- Every relative markdown link `[text](path#anchor)` in README.md and docs/**/*.md names a file that exists and,
  where it has an `#anchor`, a heading of that file (GitHub's slugs: lowercase, punctuation dropped but `-` and `_`,
  spaces to `-`, a repeated heading numbered `-1`, `-2`, ...).
- Every path to a doc page written as text (`docs/...md#anchor`) in the code, the scripts, the benchmarks, the
  examples, the suites and the tests (help texts, error messages, docstrings, comments), and in the docs themselves,
  resolves the same way; where it is followed by a section name in quotes on the same line (`, "Error rates"`), that
  name is a heading or emphasised text of the page.
- Each page of the manual (docs/ but docs/measurements/) is under 25 KB, so that it reads in one sitting.

Only the standard library and pytest.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
MANUAL_PAGE_LIMIT = 25_000  # bytes, as `wc -c` counts them
CODE_FOLDERS = ("pytest_modelbench", "scripts", "benchmarks", "examples", "suites", "tests")
CODE_FILES = ("conftest.py",)
TEXT_SUFFIXES = {".py", ".sh", ".yml", ".yaml", ".json", ".md", ".toml", ".cfg", ".ini", ".txt", ""}

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"""<a\s+(?:name|id)=["']([^"']+)["']""")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# `(?<![\w-])`: `docs/` starts the path, not the end of another folder's name (`mydocs/`); `../docs/` counts
DOC_PATH = re.compile(r"(?<![\w-])((?:\.\./)*docs/[A-Za-z0-9_./-]+\.md)(#[A-Za-z0-9_-]+)?")
QUOTED_SECTION = re.compile(r'\s*(?:,\s*|\(\s*)"([^"\n]+)"')


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield number, line


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def shown(path: Path) -> Path:
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def link_problem(source: Path, target: str) -> str | None:
    """Why a relative link written in `source` does not resolve, or None."""
    path_part, _, anchor = target.partition("#")
    resolved = (source.parent / path_part).resolve() if path_part else source
    if not resolved.exists():
        return f"{target}: no such file ({shown(resolved)})"
    if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
        return f"{target}: no heading '#{anchor}' in {shown(resolved)}"
    return None


def markdown_links(path: Path):
    """(line number, target) of each relative link of a markdown file, outside code."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, ...
                continue
            yield number, target


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def code_files() -> list[Path]:
    files = [REPO / name for name in CODE_FILES if (REPO / name).is_file()]
    for folder in CODE_FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and path != Path(__file__).resolve():
                if "__pycache__" not in path.parts:
                    files.append(path)
    return files


def page_text_for_sections(path: Path) -> str:
    """A page's headings and emphasised text, lowercased, for a section named in quotes."""
    text = path.read_text(encoding="utf-8")
    parts = [m.group(2) for _, line in prose_lines(text) if (m := HEADING.match(line))]
    parts += re.findall(r"\*\*([^*]+)\*\*", text)
    parts += re.findall(r"(?<![*\w])\*([^*\n]+)\*(?![*\w])", text)
    return "\n".join(parts).lower()


def code_reference_problems(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in DOC_PATH.finditer(line):
            doc, anchor = match.group(1), match.group(2) or ""
            page = REPO / doc[doc.index("docs/"):]
            where = f"{path.relative_to(REPO)}:{number}"
            problem = link_problem(REPO / "README.md", f"{page.relative_to(REPO)}{anchor}")
            if problem:
                problems.append(f"{where}: {problem}")
                continue
            section = QUOTED_SECTION.match(line, match.end())
            if section and section.group(1).lower() not in page_text_for_sections(page):
                problems.append(f"{where}: {doc} has no section \"{section.group(1)}\"")
    return problems


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_of_the_docs_resolves(path):
    problems = [f"{path.relative_to(REPO)}:{number}: {problem}"
                for number, target in markdown_links(path) if (problem := link_problem(path, target))]
    assert problems == []


def test_every_doc_path_in_the_code_resolves():
    files = code_files()
    assert len(files) > 100, "the code folders were not found"
    problems = [problem for path in files for problem in code_reference_problems(path)]
    assert problems == []


def test_every_doc_path_written_as_text_in_the_docs_resolves():
    problems = [problem for path in markdown_files() for problem in code_reference_problems(path)]
    assert problems == []


@pytest.mark.parametrize("path", sorted(p for p in DOCS.rglob("*.md") if "measurements" not in p.relative_to(DOCS).parts),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_each_manual_page_reads_in_one_sitting(path):
    assert len(path.read_bytes()) < MANUAL_PAGE_LIMIT, f"{path.relative_to(REPO)}: move measurements to docs/measurements/"


def test_the_checks_reject_what_does_not_resolve(tmp_path):
    assert slug("BBQ (`suites/bbq`)") == "bbq-suitesbbq"
    assert slug("Real fine-tuned checkpoints (CrowS-Pairs English)") == "real-fine-tuned-checkpoints-crows-pairs-english"
    assert slug("The outcome `error`") == "the-outcome-error"
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Same\n\n## Same\n\n```\n## In code\n```\n", encoding="utf-8")
    assert anchors(page) == {"title", "same", "same-1"}
    assert link_problem(page, "page.md#same-1") is None
    assert link_problem(page, "#title") is None
    assert "no heading" in link_problem(page, "page.md#in-code")
    assert "no heading" in link_problem(page, "#nowhere")
    assert "no such file" in link_problem(page, "other.md")
    with_links = tmp_path / "links.md"
    with_links.write_text("[a](page.md) `[b](x.md)` [c](https://example.org)\n```\n[d](y.md)\n```\n", encoding="utf-8")
    assert [target for _, target in markdown_links(with_links)] == ["page.md"]
