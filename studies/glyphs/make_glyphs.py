"""A 100-class balanced glyph benchmark, rendered offline from real fonts (issue 25, item 1).

Classes: 100 characters of the Latin, Greek and Cyrillic alphabets and the digits; characters whose
glyphs are the same shape in most fonts once fitted to a box are merged into one class (e.g. Latin O,
Greek Omicron, Cyrillic O, the digit 0 and lower-case o), the others dropped. ``CLASSES`` below lists
every class with its member characters and the reason of each merge; docs/benchmarks/glyphs.md is its
data card.

Sources: every ``.ttf`` / ``.otf`` file of the Debian font packages in ``PACKAGES``, installed with

    apt-get install -y fonts-noto-core fonts-dejavu-core fonts-dejavu-extra fonts-cmu \\
        fonts-liberation2 fonts-freefont-ttf fonts-croscore fonts-roboto-unhinted fonts-open-sans \\
        fonts-linuxlibertine fonts-ebgaramond fonts-sil-gentium fonts-hack fonts-jetbrains-mono \\
        fonts-urw-base35

(``fonts-roboto-unhinted`` is what the ``fonts-roboto`` metapackage installs; the Type 1 copies of
fonts-urw-base35 are left out, its ``.otf`` files are the same faces). A font is used only if its
character map covers every member of every class and each of them renders ink that is not the font's
``.notdef`` box ("tofu"); a font that fails for any character is left out of the whole benchmark
(listed on stderr), so every font contributes every class and the splits stay balanced.

Splits: font FAMILIES (``design_group``: weights, widths, optical sizes and metric or derived clones of
one design are one group) are shuffled with ``--seed`` and dealt to test, validation and training
(20% / 20% / the rest of the groups, at least one each), so the test typefaces are never seen in
training. Every used font renders every class ``--variants`` times, so each split holds the same count
per class: ``fonts_in_split * variants``.

Rendering: the glyph at 96 px, a stroke-width change (thinner: erosion; thicker: PIL's stroke), a
random rotation, shear and scale, then the glyph's ink box fitted (aspect ratio kept) into the
``--size`` box with a small random offset, and a Gaussian blur; white ink on black, uint8, the
brightest pixel 255 (thin fonts would otherwise give faint grey glyphs). Each image
has its own generator seeded by (``--seed``, font file name, class, variant): the same inputs give
the same bytes.

Output (mr2's ``arrays`` format, read by ``data.name: arrays``): ``x_train`` / ``x_test`` uint8
``[N, 1, size, size]``, ``y_train`` / ``y_test`` int64, ``class_names``; the validation families under
``x_val`` / ``y_val`` (the ``arrays`` reader ignores them; ``--test-split val`` writes them as
``x_test`` / ``y_test`` instead, for model selection on unseen typefaces without touching the test
families); ``fonts_train`` / ``fonts_val`` / ``fonts_test`` name the font files. The ``.npz`` is written
with fixed zip dates (byte-identical reruns) and atomically.

    python studies/glyphs/make_glyphs.py --out glyphs.npz
    python studies/glyphs/make_glyphs.py --out tiny.npz --fonts-dir /usr/share/fonts/truetype/dejavu
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from fontTools.ttLib import TTFont
from PIL import Image, ImageChops, ImageDraw, ImageFilter, ImageFont

PACKAGES = (
    "fonts-noto-core", "fonts-dejavu-core", "fonts-dejavu-extra", "fonts-cmu", "fonts-liberation2",
    "fonts-freefont-ttf", "fonts-croscore", "fonts-roboto-unhinted", "fonts-open-sans",
    "fonts-linuxlibertine", "fonts-ebgaramond", "fonts-sil-gentium", "fonts-hack",
    "fonts-jetbrains-mono", "fonts-urw-base35",
)
FONT_SUFFIXES = (".ttf", ".otf")

MISSING_PACKAGES = (
    "make_glyphs: Debian font packages not installed: {missing}; install them with "
    "`apt-get install -y {missing}` (or pass --fonts-dir DIR)"
)
NO_DPKG = (
    "make_glyphs: dpkg-query not found, so the Debian font packages cannot be located; run on Debian / "
    "Ubuntu after `apt-get install -y {packages}`, or pass --fonts-dir DIR"
)
NO_FONTS = (
    "make_glyphs: none of the {found} .ttf / .otf files found has a glyph for every member of the {count} "
    "classes (the reasons are listed above); add fonts with Latin, Greek and Cyrillic letters"
)
TOO_FEW_GROUPS = (
    "make_glyphs: {count} font design group(s) cover all classes ({groups}); at least 3 are needed "
    "for the train / validation / test split; add fonts of other families"
)
BAD_ARGUMENT = "make_glyphs: {name} must be {rule}, got {value}"
OUT_SUFFIX = "make_glyphs: --out must end in .npz, got {out}"

# (class name, member characters, why they are one class). The first member names the class.
# Members are the characters whose glyphs are the same shape in most fonts once the glyph's ink box
# is fitted to the image box (studies/glyphs/lookalikes.py measures it); a font's variants render the
# members in turn, from a member fixed by the font file's name (crc32), so all are used across fonts.
_LATIN_CAPS_SAME_AS_SMALL = "lower case is the capital's shape at a smaller size"
_CAP_LOOKALIKES = "Greek / Cyrillic capital drawn as the Latin one"
CLASSES: tuple[tuple[str, str, str], ...] = (
    # Digits (0 is in O).
    ("1", "1", ""),
    ("2", "2", ""),
    ("3", "3З", "Cyrillic Ze is drawn as the digit 3 in many fonts (45%)"),
    *((d, d, "") for d in "456789"),
    # Latin capitals, with their Greek / Cyrillic look-alikes and same-shape lower case.
    ("A", "AΑА", _CAP_LOOKALIKES),
    ("B", "BΒВ", _CAP_LOOKALIKES),
    ("C", "CcСс", _LATIN_CAPS_SAME_AS_SMALL + "; Cyrillic Es is drawn as C"),
    ("D", "D", ""),
    ("E", "EΕЕ", _CAP_LOOKALIKES),
    ("F", "F", ""),
    ("G", "G", ""),
    ("H", "HΗН", _CAP_LOOKALIKES),
    ("I", "IlΙ", "capital I, small l and Greek Iota are one vertical stroke in sans-serif fonts"),
    ("J", "J", ""),
    ("K", "KΚК", _CAP_LOOKALIKES),
    ("L", "L", ""),
    ("M", "MΜМ", _CAP_LOOKALIKES),
    ("N", "NΝ", _CAP_LOOKALIKES),
    ("O", "OoΟοОо0", "a ring in most fonts: Latin, Greek and Cyrillic O in both cases, and the digit 0"),
    ("P", "PΡР", _CAP_LOOKALIKES),
    ("Q", "Q", ""),
    ("R", "R", ""),
    ("S", "Ss", _LATIN_CAPS_SAME_AS_SMALL),
    ("T", "TΤТ", _CAP_LOOKALIKES),
    ("U", "U", ""),
    ("V", "Vvν", _LATIN_CAPS_SAME_AS_SMALL + "; Greek nu is a v with a curved arm (38%)"),
    ("W", "Ww", _LATIN_CAPS_SAME_AS_SMALL),
    ("X", "XxΧХх", _LATIN_CAPS_SAME_AS_SMALL + "; Greek Chi and Cyrillic Ha are drawn as X"),
    ("Y", "YΥ", _CAP_LOOKALIKES),
    ("Z", "ZzΖ", _LATIN_CAPS_SAME_AS_SMALL + "; Greek Zeta capital is drawn as Z"),
    # Latin small letters of their own shape.
    *((c, c, "") for c in "abdefghijkmn"),
    ("p", "pρ", "Greek rho is a p without the stem above the bowl (59%)"),
    *((c, c, "") for c in "qrt"),
    ("u", "uυ", "Greek upsilon is a u without the stem (42%)"),
    ("y", "y", ""),
    # Greek capitals not drawn as Latin ones (with the Cyrillic capitals drawn as them).
    ("Γ", "ΓГ", "Cyrillic Ge is drawn as Gamma"),
    ("Δ", "Δ", ""),
    ("Θ", "Θ", ""),
    ("Λ", "Λ", ""),
    ("Ξ", "Ξ", ""),
    ("Π", "ΠП", "Cyrillic Pe is drawn as Pi"),
    ("Σ", "Σ", ""),
    ("Φ", "ΦФ", "Cyrillic Ef is drawn as Phi"),
    ("Ψ", "Ψ", ""),
    ("Ω", "Ω", ""),
    # Greek small letters not drawn as Latin ones.
    *((c, c, "") for c in "αβγδεζηθικλμξπσ"),
    ("ς", "ς", "final sigma: a shape of its own"),
    *((c, c, "") for c in "τφχψω"),
    # Cyrillic capitals not drawn as Latin or Greek ones. The Cyrillic small letters are left out:
    # upright fonts draw most as small capitals (the capital's shape), italics as Latin look-alikes.
    *((c, c, "") for c in "БДЖИЛУЦЧШЩЪЫЬЭЮЯ"),
)

# Family names that are one design: metric-compatible or derived clones, optical sizes, widths.
_SAME_DESIGN = {
    "Arimo": "Liberation Sans",
    "Tinos": "Liberation Serif",
    "Cousine": "Liberation Mono",
    "Hack": "DejaVu Sans Mono",  # derived from Bitstream Vera Sans Mono, as DejaVu Sans Mono is
    "FreeSans": "Nimbus Sans",  # GNU FreeFont's faces are derived from URW's Nimbus fonts
    "FreeSerif": "Nimbus Roman",
    "FreeMono": "Nimbus Mono PS",
    "Open Sans": "Noto Sans",  # Noto Sans is derived from Open Sans
    "CMU Classical Serif": "CMU Serif",
    "Linux Libertine Display O": "Linux Libertine O",
    "GentiumAlt": "Gentium",
}
_WIDTH_OR_SIZE = re.compile(
    r"\s+(Demi Condensed|Semi Condensed|SemiCondensed|Extra Condensed|Condensed|Narrow|Display|Extra|"
    r"Upright Italic|Light|Medium|Thin|Black|SemiBold|ExtraBold|ExtraLight)$"
)

RENDER_EM = 96  # glyph size in pixels before the transform and the fit
_INK = 32  # a pixel of the final image is ink above this level (of 255)


@dataclass(frozen=True)
class Font:
    """One font file and its design group."""

    path: Path
    name: str  # shown in the output and the logs: the package and the file name
    group: str


def design_group(family: str) -> str:
    """The design a family name belongs to (weights, widths, optical sizes and clones are one)."""
    previous = None
    while previous != family:
        previous = family
        family = _WIDTH_OR_SIZE.sub("", family)
    return _SAME_DESIGN.get(family, family)


def _family(path: Path) -> str:
    with open(path, "rb") as handle, TTFont(handle, lazy=True) as font:
        names = font["name"]
        return str(names.getDebugName(16) or names.getDebugName(1))


def package_fonts(packages: Sequence[str]) -> list[tuple[str, Path]]:
    """(package, font file) for every ``.ttf`` / ``.otf`` file of the packages, sorted."""
    if shutil.which("dpkg-query") is None:
        raise SystemExit(NO_DPKG.format(packages=" ".join(packages)))
    missing = []
    for package in packages:
        status = subprocess.run(
            ["dpkg-query", "-W", "-f=${db:Status-Status}", package], capture_output=True, text=True
        )
        if status.returncode != 0 or status.stdout.strip() != "installed":
            missing.append(package)
    if missing:
        raise SystemExit(MISSING_PACKAGES.format(missing=" ".join(missing)))
    found = []
    for package in packages:
        listing = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True)
        for line in listing.stdout.splitlines():
            path = Path(line)
            if path.suffix.lower() in FONT_SUFFIXES and path.is_file():
                found.append((package, path))
    return sorted(set(found), key=lambda item: (item[1].name, item[0], str(item[1])))


def directory_fonts(directory: Path) -> list[tuple[str, Path]]:
    """("dir", font file) for every ``.ttf`` / ``.otf`` file under the directory, sorted."""
    files = [p for p in directory.rglob("*") if p.suffix.lower() in FONT_SUFFIXES and p.is_file()]
    return sorted((("dir", p) for p in files), key=lambda item: (item[1].name, str(item[1])))


def _glyph_image(font: ImageFont.FreeTypeFont, char: str, stroke: int = 0) -> Image.Image:
    """The character drawn white on black on a canvas with room to spare."""
    side = 3 * RENDER_EM
    canvas = Image.new("L", (side, side), 0)
    ImageDraw.Draw(canvas).text(
        (side // 2, side // 2), char, font=font, fill=255, anchor="mm",
        stroke_width=max(stroke, 0), stroke_fill=255,
    )
    return canvas


def font_problem(path: Path, characters: str) -> str | None:
    """Why the font cannot render every character, or None when it can."""
    try:
        # Our own handle: fontTools leaves its own open when the file is not a font.
        with open(path, "rb") as handle, TTFont(handle, lazy=True) as table:
            cmap = table.getBestCmap() or {}
        font = ImageFont.truetype(str(path), RENDER_EM, layout_engine=ImageFont.Layout.BASIC)
    except Exception as exc:  # a font file FreeType or fontTools cannot read
        return f"unreadable: {type(exc).__name__}: {exc}"
    lacking = [c for c in characters if ord(c) not in cmap or cmap[ord(c)] == ".notdef"]
    if lacking:
        return f"no glyph for {''.join(lacking[:12])}{'...' if len(lacking) > 12 else ''}"
    tofu = _glyph_image(font, "\U0010fffd")  # a code point no font maps: its .notdef box
    for char in characters:
        image = _glyph_image(font, char)
        if image.getbbox() is None:
            return f"blank glyph for {char}"
        if ImageChops.difference(image, tofu).getbbox() is None:
            return f".notdef box (tofu) for {char}"
    return None


@dataclass(frozen=True)
class Distortion:
    """One variant's random changes (the neutral one: the glyph as drawn, fitted to the box)."""

    stroke: int = 0  # -1: thinner, 0: as drawn, 1..3: thicker (pixels at 96 px)
    angle: float = 0.0  # rotation, degrees
    shear: float = 0.0  # horizontal shear factor
    scale: float = 1.0  # share of the box the glyph's longer side fills
    blur: float = 0.0  # Gaussian blur radius at the output size, pixels
    shift: tuple[float, float] = (0.0, 0.0)  # offset in the free space, -1 (left / top) .. 1

    @classmethod
    def draw(cls, rng: np.random.Generator) -> Distortion:
        """Stroke -1..3, rotation +-12 degrees, shear +-0.25, scale 0.75..1, blur 0..0.8 px, shift."""
        return cls(
            stroke=int(rng.integers(-1, 4)),
            angle=float(rng.uniform(-12.0, 12.0)),
            shear=float(rng.uniform(-0.25, 0.25)),
            scale=float(rng.uniform(0.75, 1.0)),
            blur=float(rng.uniform(0.0, 0.8)),
            shift=(float(rng.uniform(-1.0, 1.0)), float(rng.uniform(-1.0, 1.0))),
        )


def render(font: ImageFont.FreeTypeFont, char: str, size: int, change: Distortion) -> np.ndarray:
    """One variant of a glyph, uint8 ``[size, size]``, white ink on black, stretched to peak at 255."""
    stroke, angle, shear, scale, blur = change.stroke, change.angle, change.shear, change.scale, change.blur
    shift = np.array(change.shift)
    image = _glyph_image(font, char, stroke)
    drawn = image.getbbox()
    if drawn is None:  # cannot happen for a checked font; kept loud
        raise RuntimeError(f"glyph {char!r} of {font.path} draws no ink")
    # A square around the ink, with room for the rotation and shear (faster than the whole canvas).
    half = int(np.ceil(0.65 * np.hypot(drawn[2] - drawn[0], drawn[3] - drawn[1]))) + 2
    middle = ((drawn[0] + drawn[2]) // 2, (drawn[1] + drawn[3]) // 2)
    image = image.crop((middle[0] - half, middle[1] - half, middle[0] + half, middle[1] + half))
    if stroke < 0:
        thinner = image.filter(ImageFilter.MinFilter(3))
        # Thin and hairline fonts keep their strokes: erode only where 60% of the ink remains.
        if np.asarray(thinner, dtype=np.int64).sum() >= 0.6 * np.asarray(image, dtype=np.int64).sum():
            image = thinner
    # Rotation after shear, about the canvas centre; PIL's AFFINE takes the inverse (output -> input).
    theta = np.deg2rad(angle)
    forward = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]]) @ np.array(
        [[1.0, shear], [0.0, 1.0]]
    )
    inverse = np.linalg.inv(forward)
    centre = np.array(image.size, dtype=float) / 2
    offset = centre - inverse @ centre
    image = image.transform(
        image.size, Image.Transform.AFFINE,
        (inverse[0, 0], inverse[0, 1], offset[0], inverse[1, 0], inverse[1, 1], offset[1]),
        resample=Image.Resampling.BILINEAR,
    )
    box = image.getbbox()
    if box is None:  # cannot happen for a checked font; kept loud
        raise RuntimeError(f"glyph {char!r} of {font.path} vanished under the transform")
    glyph = image.crop(box)
    width, height = glyph.size
    target = scale * (size - 2)  # one pixel of margin on each side at full scale
    factor = target / max(width, height)
    new = (max(1, round(width * factor)), max(1, round(height * factor)))
    glyph = glyph.resize(new, Image.Resampling.LANCZOS, reducing_gap=3.0)
    out = Image.new("L", (size, size), 0)
    free = np.array([size - new[0], size - new[1]], dtype=float)
    corner = np.clip(np.round(free / 2 + shift * free / 2), 0, free).astype(int)
    out.paste(glyph, (int(corner[0]), int(corner[1])))
    if blur > 0.05:
        out = out.filter(ImageFilter.GaussianBlur(blur))
    # Full contrast: the strokes of thin fonts (Roboto Thin) shrink to faint grey at 32 px.
    pixels = np.asarray(out, dtype=np.uint16)
    return (pixels * 255 // int(pixels.max())).astype(np.uint8)


def _image_seed(seed: int, font_name: str, label: int, variant: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, zlib.crc32(font_name.encode()), label, variant])


def split_groups(groups: Sequence[str], seed: int) -> dict[str, str]:
    """Design group -> "train" / "val" / "test": shuffled with the seed, 20% test, 20% validation."""
    ordered = sorted(set(groups))
    if len(ordered) < 3:
        raise SystemExit(TOO_FEW_GROUPS.format(count=len(ordered), groups=", ".join(ordered) or "none"))
    order = np.random.default_rng(np.random.SeedSequence([seed, 25])).permutation(len(ordered))
    n_held = max(1, round(0.2 * len(ordered)))
    split = {}
    for rank, index in enumerate(order):
        split[ordered[index]] = "test" if rank < n_held else "val" if rank < 2 * n_held else "train"
    return split


def choose_fonts(candidates: Sequence[tuple[str, Path]], log: bool = True) -> list[Font]:
    """The candidates that render every member of every class (the others named on stderr)."""
    characters = "".join(members for _, members, _ in CLASSES)
    fonts = []
    for package, path in candidates:
        name = f"{package}:{path.name}"
        problem = font_problem(path, characters)
        if problem is not None:
            if log:
                print(f"skipped {name}: {problem}", file=sys.stderr)
            continue
        fonts.append(Font(path, name, design_group(_family(path))))
    return fonts


def render_split(
    fonts: Sequence[Font], variants: int, size: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every class ``variants`` times from every font: x ``[F*K*V, 1, size, size]``, y ``[F*K*V]``."""
    images = np.zeros((len(fonts) * len(CLASSES) * variants, 1, size, size), dtype=np.uint8)
    labels = np.zeros(len(images), dtype=np.int64)
    row = 0
    for font in fonts:
        face = ImageFont.truetype(str(font.path), RENDER_EM, layout_engine=ImageFont.Layout.BASIC)
        first = zlib.crc32(font.name.encode())  # fonts start at different members
        for label, (_, members, _) in enumerate(CLASSES):
            for variant in range(variants):
                rng = np.random.default_rng(_image_seed(seed, font.name, label, variant))
                char = members[(first + variant) % len(members)]
                images[row, 0] = render(face, char, size, Distortion.draw(rng))
                labels[row] = label
                row += 1
    return images, labels


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """A ``.npz`` with fixed member dates and order, written to a temporary file then renamed."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as raw, zipfile.ZipFile(raw, "w") as archive:
            for key in sorted(arrays):
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, np.ascontiguousarray(arrays[key]), allow_pickle=False)
                info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, buffer.getvalue(), compresslevel=6)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0o600 would hide the file from other users
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def build(
    candidates: Sequence[tuple[str, Path]], variants: int, size: int, seed: int, test_split: str = "test"
) -> tuple[dict[str, np.ndarray], dict[str, list[Font]]]:
    """The benchmark's arrays and the fonts of each split."""
    fonts = choose_fonts(candidates)
    if not fonts:
        raise SystemExit(NO_FONTS.format(found=len(candidates), count=len(CLASSES)))
    split_of = split_groups([f.group for f in fonts], seed)
    by_split = {s: [f for f in fonts if split_of[f.group] == s] for s in ("train", "val", "test")}
    arrays: dict[str, np.ndarray] = {
        "class_names": np.array([name for name, _, _ in CLASSES], dtype=str)
    }
    for split, members in by_split.items():
        x, y = render_split(members, variants, size, seed)
        arrays[f"x_{split}"], arrays[f"y_{split}"] = x, y
        arrays[f"fonts_{split}"] = np.array([f"{f.name} [{f.group}]" for f in members], dtype=str)
    if test_split == "val":
        for kind in ("x", "y", "fonts"):
            arrays[f"{kind}_test"], arrays[f"{kind}_val"] = arrays[f"{kind}_val"], arrays[f"{kind}_test"]
    return arrays, by_split


def _positive(name: str, value: int, minimum: int = 1) -> int:
    if value < minimum:
        raise SystemExit(BAD_ARGUMENT.format(name=name, rule=f"an integer >= {minimum}", value=value))
    return value


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="the .npz file to write")
    parser.add_argument("--fonts-dir", type=Path, help="use the fonts under this directory instead")
    parser.add_argument("--variants", type=int, default=5, help="images per font and class (5)")
    parser.add_argument("--seed", type=int, default=0, help="split and rendering seed (0)")
    parser.add_argument("--size", type=int, default=32, help="image side in pixels (32)")
    parser.add_argument(
        "--test-split", choices=("test", "val"), default="test",
        help="families written as x_test / y_test: the test families (default) or the validation ones",
    )
    args = parser.parse_args(argv)
    _positive("--variants", args.variants)
    _positive("--size", args.size, minimum=8)
    _positive("--seed", args.seed, minimum=0)
    if args.out.suffix != ".npz":
        raise SystemExit(OUT_SUFFIX.format(out=args.out))
    folder = "an existing folder"
    if not args.out.parent.is_dir():
        raise SystemExit(BAD_ARGUMENT.format(name="--out's folder", rule=folder, value=args.out.parent))
    if args.fonts_dir is not None and not args.fonts_dir.is_dir():
        raise SystemExit(BAD_ARGUMENT.format(name="--fonts-dir", rule=folder, value=args.fonts_dir))
    started = time.perf_counter()
    candidates = directory_fonts(args.fonts_dir) if args.fonts_dir else package_fonts(PACKAGES)
    arrays, by_split = build(candidates, args.variants, args.size, args.seed, args.test_split)
    write_npz(args.out, arrays)
    per_class = {s: len(f) * args.variants for s, f in by_split.items()}
    groups = {s: len({f.group for f in fonts}) for s, fonts in by_split.items()}
    print(
        f"wrote {args.out}: {len(CLASSES)} classes; fonts (design groups) train {len(by_split['train'])} "
        f"({groups['train']}), val {len(by_split['val'])} ({groups['val']}), test {len(by_split['test'])} "
        f"({groups['test']}); per class: train {per_class['train']}, val {per_class['val']}, "
        f"test {per_class['test']}; {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
