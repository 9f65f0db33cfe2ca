"""Observation settings: which labels of the full matrix a learner gets to see.

A setting is a small value object with a text form usable on the command line:

=====================  ======================================================================
``single_positive``    SPML: one positive per row, nothing else
``pos=K,neg=M``        K positives and M negatives per row (``-1`` = all), same generator
``ratio=R``            each label kept independently with probability R (PU-MLC)
``full``               every label observed (2Y - 1)
``given``              nothing simulated: the data's own observed labels (users' data)
=====================  ======================================================================

The bit-exact generators live in :mod:`spmlkit.protocol`; this module only names them. Why
they are built as they are: docs/protocol.md, "Observed labels" and "Known-label ratio".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .observe import observe_labels, observe_ratio, observed_summary

__all__ = ["Observation"]


@dataclass(frozen=True)
class Observation:
    kind: str = "single_positive"  # "single_positive" | "counts" | "ratio" | "full" | "given"
    num_pos: int = 1
    num_neg: int = 0
    ratio: float | None = None
    seed: int | None = None  # None: the protocol's default (1200 for counts, 0 for ratio)

    @classmethod
    def parse(cls, text: str) -> "Observation":
        """Parse ``single_positive`` / ``spml`` / ``pos=K,neg=M`` / ``ratio=R`` / ``full``.

        A trailing ``,seed=S`` overrides the generator's seed.
        """
        raw = text.strip().lower()
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        seed = None
        rest = []
        for p in parts:
            if p.startswith("seed="):
                seed = _int(p[5:], text)
            else:
                rest.append(p)
        if rest in (["single_positive"], ["spml"], ["1p"], []):
            return cls("single_positive", seed=seed)
        if rest == ["full"]:
            return cls("full")
        if rest == ["given"]:
            return cls("given")
        if len(rest) == 1 and rest[0].startswith("ratio="):
            value = _float(rest[0][6:], text)
            if not 0 < value <= 1:
                raise ValueError(f"observation {text!r}: ratio must be in (0, 1], got {value}")
            return cls("ratio", ratio=value, seed=seed)
        keys = dict(p.split("=", 1) for p in rest if "=" in p)
        if keys and set(keys) <= {"pos", "neg"} and len(keys) == len(rest):
            num_pos, num_neg = _int(keys.get("pos", "1"), text), _int(keys.get("neg", "0"), text)
            if num_pos == 0 and num_neg == 0:
                raise ValueError(f"observation {text!r} observes no label at all; keep at least one positive "
                                 "or negative per row (pos=K with K >= 1, or -1 for all)")
            return cls("counts", num_pos=num_pos, num_neg=num_neg, seed=seed)
        raise ValueError(
            f"unknown observation setting {text!r}; use 'single_positive', 'pos=K,neg=M' "
            "(-1 = all), 'ratio=R' (0 < R <= 1), 'full' or 'given' (the data's own labels), optionally with ',seed=S'"
        )

    def apply(self, Y: np.ndarray) -> np.ndarray:
        """The observed {-1, 0, 1} matrix for full labels ``Y`` (0/1)."""
        if self.kind == "given":
            raise ValueError("observation 'given' simulates nothing: the data must bring its own observed labels")
        if self.kind == "full":
            y = np.asarray(Y)
            observed_summary(y)  # validates shape
            return (2 * y.astype(np.int8) - 1).astype(np.int8)
        if self.kind == "ratio":
            return observe_ratio(Y, self.ratio, seed=0 if self.seed is None else self.seed)
        pos, neg = (1, 0) if self.kind == "single_positive" else (self.num_pos, self.num_neg)
        return observe_labels(
            Y, num_pos=pos, num_neg=neg, seed=1200 if self.seed is None else self.seed, on_empty="allow"
        )

    def __str__(self) -> str:
        seed = f",seed={self.seed}" if self.seed is not None else ""
        if self.kind == "single_positive":
            return "single_positive" + seed
        if self.kind in ("full", "given"):
            return self.kind
        if self.kind == "ratio":
            return f"ratio={self.ratio:g}{seed}"
        return f"pos={self.num_pos},neg={self.num_neg}{seed}"


def _int(value: str, text: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"observation {text!r}: {value!r} is not an integer") from None


def _float(value: str, text: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"observation {text!r}: {value!r} is not a number") from None
