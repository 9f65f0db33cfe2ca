"""docs/bad-input.md backs each kind of bad input with a named test: every test it names exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_named_on_the_bad_input_page_exists():
    page = (ROOT / "docs" / "bad-input.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| ") and not line.startswith("| kind")
            and not line.startswith("|---")]
    assert rows, "the table of kinds is empty"
    missing = []
    for row in rows:
        named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row.rsplit("|", 2)[-2])
        assert named, f"a kind without a test: {row[:80]}"
        for path, name in named:
            source = ROOT / path
            if not source.is_file() or not re.search(rf"^def {name}\(", source.read_text(), re.M):
                missing.append(f"{path}::{name}")
    assert not missing, missing
