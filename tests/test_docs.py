"""Every reason the code cites lives in the repository: each `docs/X.md, "Section"` exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r'docs/([a-z_-]+\.md),\s*"([^"]+)"')


def _headings(doc: Path) -> set[str]:
    """Heading texts, and for headings that start with a `name` in backticks, that name too."""
    out = set()
    for line in doc.read_text().splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            title = m.group(1).strip()
            out.add(title)
            out.update(re.findall(r"`([^`]+)`", title.split(":")[0]))
    return out


def test_every_citation_in_code_points_to_an_existing_section():
    missing = []
    files = [*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/*.py")]
    for path in files:
        for doc, section in CITATION.findall(path.read_text()):
            section = re.sub(r"\s*\n\s*#*:?\s*", " ", section)  # a citation wrapped over comment lines
            target = ROOT / "docs" / doc
            if not target.is_file() or section not in _headings(target):
                missing.append(f"{path.relative_to(ROOT)}: docs/{doc}, {section!r}")
    assert not missing, "\n".join(missing)


def test_no_citation_of_notes_outside_the_repository():
    pattern = re.compile(r"REFERENCE\.md|DESIGN\.md|\.\./shared|\bG-\d+\b")
    offenders = [str(p.relative_to(ROOT)) for p in [*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/**/*.py")]
                 if p.name != "test_docs.py" and pattern.search(p.read_text())]
    assert not offenders, offenders
