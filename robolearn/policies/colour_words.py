"""Colour words read by how the colour looks: the CIELAB colour of each word that names one (``policy.colour_words``).

Static word vectors know little of colours: "crimson" and "scarlet" share one vector, nearer "blue" than "red"
(docs/architecture.md, "Instruction encoder"). People name colours by how they look, and so does this lookup:

    word -> its sRGB in the XKCD colour survey (949 names that people gave to colours; CC0), as matplotlib's wheel
            ships it (``matplotlib.colors.XKCD_COLORS``), one-word names only
         -> CIELAB (D65 white)  ->  features SCALE * [L - 50, a, b, 50]
    any other word -> zeros

SCALE = 1/2 makes a colour word's features (norm 35-58 for bench-vla's) as large as a word vector (28-134), so its key
starts on a par with the other words'. At 1/50 (norm about 2) the colour words' keys started small, BC's loss stayed
higher all through training and success fell (docs/algorithms.md, "VLA").

CIELAB because distances in it follow how different two colours look: "crimson" is 40 from "red" and 118 from
"blue". Words are cut as the word vectors cut them (``text_encoder.words``), so the features line up with the
vectors. Some names are nouns too ("brick", "sand", "tea"). Colour words come before the noun they describe, so an
instruction's last word, when an earlier word already names a colour, is taken as its noun: "the green brick" names
green alone. Elsewhere such a word reads as a colour ("fetch the brick one").
"""

from __future__ import annotations

from functools import cache

import numpy as np

from robolearn.policies.text_encoder import words

FEATURES = 4  # L, a, b (scaled) and a flag: this word names a colour
SCALE = 0.5   # features per CIELAB unit
FLAG = 50 * SCALE  # the last feature of a word that names a colour (0 for any other)
D65 = np.array([0.95047, 1.0, 1.08883])
SRGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805],
                        [0.2126, 0.7152, 0.0722],
                        [0.0193, 0.1192, 0.9505]])


def srgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB in [0, 1] (..., 3) -> CIELAB (..., 3): L in [0, 100], a and b about [-128, 127]."""
    rgb = np.asarray(rgb, np.float64)
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = linear @ SRGB_TO_XYZ.T / D65
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], axis=-1)


@cache
def colour_table() -> dict[str, np.ndarray]:
    """One-word XKCD colour names -> CIELAB (3,) float32, loaded once per process."""
    from matplotlib.colors import XKCD_COLORS  # the survey's names as "xkcd:<name>" -> "#rrggbb"

    names = {key.removeprefix("xkcd:"): value for key, value in XKCD_COLORS.items()}
    single = {name: value for name, value in names.items() if name.isalpha()}
    rgb = np.array([[int(v[i:i + 2], 16) / 255 for i in (1, 3, 5)] for v in single.values()])
    return dict(zip(single, srgb_to_lab(rgb).astype(np.float32), strict=True))


def colour_features(texts: list[str], max_words: int) -> np.ndarray:
    """texts -> (B, max_words, FEATURES) float32: each word's colour features, zeros for a word that names none, for
    the noun that ends an instruction already naming a colour, and for padding. Words past ``max_words`` are
    dropped, as the word vectors drop them."""
    table = colour_table()
    out = np.zeros((len(texts), max_words, FEATURES), np.float32)
    for b, text in enumerate(texts):
        said = words(text)
        named = [w for w, word in enumerate(said) if word in table]
        if len(named) > 1 and named[-1] == len(said) - 1:
            named.pop()  # "the green brick": the last word is the noun the colour words describe
        for w in named:
            if w < max_words:
                lab = table[said[w]]
                out[b, w] = (SCALE * (lab[0] - 50), SCALE * lab[1], SCALE * lab[2], FLAG)
    return out
