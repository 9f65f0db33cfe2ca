"""How many source files name each of the methods that bring more than a loss formula.

A method that is one object (docs/architecture.md, "Methods") is named where it is defined, where
it is registered, and where a table or a preset names it for the user; a method named throughout
the training layer is a method whose parts are spread over the layers. This prints, for each of
the eight methods, the number of files under ``src/spmlkit`` that name it (as a word, any case)
and those of them under ``training/``:

    python tools/method_footprint.py [SRC]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: each method as the words that name it in code, comments and docstrings
PATTERNS = {
    "PU-MLC": r"\bpu[_-]mlc\b",
    "CRISP": r"\bcrisp\b",
    "SMILE": r"\bsmile\b",
    "PLC/LAC": r"\b(plc|lac)\b",
    "BoostLU": r"\bboostlu",
    "MIME": r"\bmime\b",
    "OPML-SP": r"\bopml[_-]sp\b",
    "L1R/L2R": r"\bl[12]r\b",
}


def footprint(src: Path) -> dict[str, tuple[list[Path], list[Path]]]:
    """Per method: every ``.py`` file under ``src`` naming it, and those under ``training/``."""
    files = sorted(p for p in src.rglob("*.py") if "egg-info" not in str(p))
    texts = {p: p.read_text(encoding="utf-8") for p in files}
    out = {}
    for method, pattern in PATTERNS.items():
        regex = re.compile(pattern, re.IGNORECASE)
        named = [p for p in files if regex.search(texts[p])]
        out[method] = (named, [p for p in named if "training" in p.relative_to(src).parts])
    return out


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src" / "spmlkit"
    print(f"{'method':<10} {'files':>5} {'in training/':>12}  training files")
    for method, (named, training) in footprint(src).items():
        names = ", ".join(p.name for p in training)
        print(f"{method:<10} {len(named):>5} {len(training):>12}  {names}")


if __name__ == "__main__":
    main()
