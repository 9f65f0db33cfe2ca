"""Every link between the README and the pages of docs/ leads somewhere: a relative link names a
file that exists (and a heading of it, after ``#``), and a section cited as ``page.md, "Section"``
is a heading of that page. A reader who follows one never lands on nothing."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
#: [text](target): the target up to a space or the closing parenthesis
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: a cited section: a page (``page.md`` or with its folder, as the README cites one) then a comma
#: and the heading in double quotes, or a link to the page then the same
CITED = re.compile(r'(?:\]\(|\b)((?:docs/)?[a-z_-]+\.md)(?:#[^)]*)?\)?,\s*"([^"]+)"')


def _prose(doc: Path, inline_code: bool = False) -> str:
    """The text a reader reads as prose: code fences left out, and inline code too unless asked
    (a command's ``--config run.yaml`` is not a link; a cited heading may hold code), lines joined
    so that a citation may wrap."""
    text = FENCE.sub("", doc.read_text())
    if not inline_code:
        text = re.sub(r"`[^`\n]*`", "", text)
    return re.sub(r"\s*\n\s*", " ", text)


def _headings(doc: Path) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^#+\s+(.*)$", FENCE.sub("", doc.read_text()), re.M)]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")


def _section_names(doc: Path) -> set[str]:
    """A heading's text, its text before a colon (``"Label algorithms"``), and for a heading that
    starts with a `name`, that name (``"em_apl"``)."""
    out = set()
    for title in _headings(doc):
        out.update((title, title.split(":")[0].strip()))
        out.update(re.findall(r"`([^`]+)`", title.split(":")[0]))
    return out


def _resolve(doc: Path, target: str) -> Path:
    return (doc.parent / target).resolve() if not target.startswith("docs/") or doc.parent == ROOT \
        else (ROOT / target).resolve()


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file_and_heading(doc):
    broken = []
    for target in LINK.findall(_prose(doc)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = _resolve(doc, path) if path else doc
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and anchor not in {_slug(h) for h in _headings(file)}:
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.name}")
    assert not broken, f"{doc.name}: " + "; ".join(broken)


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_every_cited_section_is_a_heading_of_its_page(doc):
    missing = []
    for page, section in CITED.findall(_prose(doc, inline_code=True)):
        if section.startswith("<"):  # a pattern the text explains ("<registry name>"), not a section
            continue
        file = ROOT / "docs" / page.removeprefix("docs/")
        if not file.is_file() or section not in _section_names(file):
            missing.append(f"{page}, {section!r}")
    assert not missing, f"{doc.name}: " + "; ".join(missing)


def test_the_link_checks_see_a_broken_link(tmp_path):
    """The checks themselves: a missing page, a missing anchor and a missing section are found."""
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "a.md"
    cited = "docs/" + 'a.md, "Nope"'  # built, so that tests/test_docs.py does not take it for a citation
    page.write_text(f"# A\n\n## Two words\n\nSee [b](b.md), [here](#two-words), [no](#three), and {cited}.\n")
    assert [t for t in LINK.findall(_prose(page))] == ["b.md", "#two-words", "#three"]
    assert not (tmp_path / "docs" / "b.md").exists()
    assert {_slug(h) for h in _headings(page)} == {"a", "two-words"}
    assert CITED.findall(_prose(page)) == [("docs/a.md", "Nope")]
    assert _slug("Users' own data (`prepare folder`, `prepare csv`)") == "users-own-data-prepare-folder-prepare-csv"
