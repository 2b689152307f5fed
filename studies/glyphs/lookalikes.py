"""Which characters have the same glyph shape once fitted to the box: the evidence for the merges of
make_glyphs.CLASSES (docs/benchmarks/glyphs.md quotes its output).

Every character of the candidate set (the class members plus the look-alikes left out) is drawn
without distortion, fitted to the 32 x 32 box, in every font make_glyphs uses; two characters are
"the same shape" in a font when their ink masks (level >= 128) overlap with an intersection over
union of at least ``--iou`` (0.7). Printed: for each class, how often its members are the same shape
as the first member; then every pair of characters in different classes that is the same shape in at
least ``--share`` (30%) of the fonts.

    python studies/glyphs/lookalikes.py [--fonts-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import ImageFont

sys.path.insert(0, str(Path(__file__).parent))
import make_glyphs as glyphs

# Characters not in any class, checked against the classes (the Cyrillic small letters).
EXTRA = "бвгдежзийклмнптуфцчшщъыьэюя"


def masks(font: glyphs.Font, characters: str, size: int = 32) -> np.ndarray:
    """Ink masks ``[len(characters), size * size]`` of the undistorted, fitted glyphs."""
    face = ImageFont.truetype(str(font.path), glyphs.RENDER_EM, layout_engine=ImageFont.Layout.BASIC)
    neutral = glyphs.Distortion()
    return np.stack([glyphs.render(face, c, size, neutral).reshape(-1) >= 128 for c in characters])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fonts-dir", type=Path)
    parser.add_argument("--iou", type=float, default=0.7)
    parser.add_argument("--share", type=float, default=0.3)
    args = parser.parse_args()
    candidates = (
        glyphs.directory_fonts(args.fonts_dir) if args.fonts_dir else glyphs.package_fonts(glyphs.PACKAGES)
    )
    fonts = glyphs.choose_fonts(candidates, log=False)
    fonts = [f for f in fonts if glyphs.font_problem(f.path, EXTRA) is None]
    members = "".join(m for _, m, _ in glyphs.CLASSES)
    characters = members + EXTRA
    class_of = {c: name for name, m, _ in glyphs.CLASSES for c in m}
    same = np.zeros((len(characters), len(characters)))
    for font in fonts:
        ink = masks(font, characters).astype(np.float64)
        inter = ink @ ink.T
        area = ink.sum(axis=1)
        same += inter / np.maximum(area[:, None] + area[None, :] - inter, 1) >= args.iou
    same /= len(fonts)
    index = {c: i for i, c in enumerate(characters)}
    print(f"{len(fonts)} fonts; same shape: ink IoU >= {args.iou}")
    print("class members, share of fonts where each is the same shape as the first member:")
    for name, chars, _ in glyphs.CLASSES:
        if len(chars) > 1:
            shares = ", ".join(f"{c} {same[index[chars[0]], index[c]]:.0%}" for c in chars[1:])
            print(f"  {name}: {shares}")
    print(f"pairs in different classes (or left out), the same shape in >= {args.share:.0%} of fonts:")
    for i, a in enumerate(characters):
        for b in characters[i + 1 :]:
            share = same[i, index[b]]
            if share >= args.share and class_of.get(a, a) != class_of.get(b, b):
                where = {c: class_of.get(c, "left out") for c in (a, b)}
                print(f"  {a} ({where[a]}) ~ {b} ({where[b]}): {share:.0%}")


if __name__ == "__main__":
    main()
