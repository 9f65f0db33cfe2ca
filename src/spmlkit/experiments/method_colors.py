"""Each method's colour, one in every figure: the report's analysis figures and the leaderboard's
diagram, so that a method is found by its colour when figures are read side by side
(docs/figures.md, "The figures").

spmlkit's own methods have fixed colours (families share a hue, the references are black and
grey); any other name (a plug-in's method) gets a colour derived from its name, the same on
every machine.
"""

from __future__ import annotations

import colorsys
import hashlib

__all__ = ["METHOD_COLORS", "method_color"]

#: fixed colours of the spmlkit methods (references dark/grey, families share a hue)
METHOD_COLORS: dict[str, str] = {
    "bce": "#000000",  # full labels: black
    "iun": "#525252",
    "an": "#969696",  # AN: grey
    "wan": "#bdbdbd",
    "dw": "#8c6d31",
    "l1r": "#bd9e39",
    "l2r": "#e7ba52",
    "an_ls": "#9e9ac8",
    "n_ls": "#6a51a3",
    "epr": "#e7969c",
    "entmin": "#17becf",
    "focal": "#ff7f0e",
    "asl": "#ffbb78",
    "hill": "#8c564b",
    "splc": "#c49c94",
    "role": "#2ca02c",  # ROLE: greens
    "role_li": "#98df8a",
    "ll_r": "#e6550d",  # large loss: oranges
    "ll_ct": "#fd8d3c",
    "ll_cp": "#a63603",
    "em": "#1f77b4",  # EM: blue
    "em_apl": "#08306b",  # EM+APL: dark blue
    "zlpr": "#bcbd22",
    "opml": "#9467bd",  # OPML: purples
    "opml_sp": "#54278f",
    "gr": "#d62728",  # GR: red
    "pu_mlc": "#e377c2",
    "crisp": "#7b4173",  # CRISP: plum
    "crisp_true_prior": "#ce6dbd",  # CRISP with the true priors (a reference): light plum
    "smile": "#637939",  # SMILE: olive
    "plc": "#3182bd",  # LAC's stages: steel blues
    "lac": "#6baed6",
    "boostlu_ll_r": "#1b9e77",  # BoostLU + large loss: teals
    "boostlu_ll_ct": "#66c2a5",
    "boostlu_ll_cp": "#00574a",
    "mime": "#393b79",  # MIME: indigo
}


def method_color(name: str) -> str:
    """The colour of a method in every figure: fixed for spmlkit's methods, otherwise
    derived from an MD5 of the name (Python's ``hash`` is salted per process, MD5 is the
    same everywhere), with saturation and value kept in a readable range."""
    if name in METHOD_COLORS:
        return METHOD_COLORS[name]
    h = hashlib.md5(name.encode("utf-8")).digest()
    r, g, b = colorsys.hsv_to_rgb(h[0] / 255.0, 0.55 + 0.35 * h[1] / 255.0, 0.55 + 0.35 * h[2] / 255.0)
    return "#{:02x}{:02x}{:02x}".format(round(r * 255), round(g * 255), round(b * 255))
