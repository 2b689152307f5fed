"""The glyph benchmark generator (studies/glyphs/make_glyphs.py) on the three fonts of fonts-dejavu-core.

Needs the Debian package fonts-dejavu-core (.ci/run installs it); skips, saying so, where it is absent.
"""

from __future__ import annotations

import copy
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from fontTools import subset
from fontTools.ttLib import TTFont

from helpers import load_script
from mr2.config import DataSection
from mr2.data import build_datasets
from mr2.data.arrays import load_arrays

SCRIPT = Path(__file__).resolve().parents[2] / "studies" / "glyphs" / "make_glyphs.py"
DEJAVU = Path("/usr/share/fonts/truetype/dejavu")
# One file of each of fonts-dejavu-core's three designs, and a second weight of one of them.
FAMILIES = ("DejaVuSans.ttf", "DejaVuSansMono.ttf", "DejaVuSerif.ttf")
BOLD = "DejaVuSans-Bold.ttf"

pytestmark = pytest.mark.skipif(
    not all((DEJAVU / name).is_file() for name in (*FAMILIES, BOLD)),
    reason=f"fonts-dejavu-core is not installed (no {DEJAVU}/DejaVuSans.ttf ...): "
    "`apt-get install fonts-dejavu-core` (.ci/run does)",
)

# The 100 classes, written out: a change to the class table must change this test too.
EXPECTED_CLASSES = list(
    "123456789" "ABCDEFGHIJKLMNOPQRSTUVWXYZ" "abdefghijkmnpqrtuy" "ΓΔΘΛΞΠΣΦΨΩ" "αβγδεζηθικλμξπσςτφχψω"
    "БДЖИЛУЦЧШЩЪЫЬЭЮЯ"
)


@pytest.fixture(scope="module")
def glyphs() -> ModuleType:
    return load_script(SCRIPT, "make_glyphs")


def _latin_only(path: Path) -> Path:
    """DejaVu Sans cut down to ASCII: a real font without Greek and Cyrillic."""
    options = subset.Options()
    options.notdef_outline = True
    with TTFont(DEJAVU / "DejaVuSans.ttf") as font:
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=range(0x20, 0x7F))
        subsetter.subset(font)
        font.save(path)
    return path


def _with_zhe_as(path: Path, glyph_of_zhe: str) -> Path:
    """DejaVu Sans whose character map sends Ж to another glyph (``tofu``: a copy of .notdef)."""
    with TTFont(DEJAVU / "DejaVuSans.ttf") as font:
        _map_zhe(font, glyph_of_zhe)
        font.save(path)
    return path


def _map_zhe(font: TTFont, glyph_of_zhe: str) -> None:
    if glyph_of_zhe == "tofu":
        order = font.getGlyphOrder()
        font["glyf"].glyphs["tofu"] = copy.deepcopy(font["glyf"][".notdef"])
        font["hmtx"].metrics["tofu"] = font["hmtx"].metrics[".notdef"]
        font.setGlyphOrder([*order, "tofu"])
        font["glyf"].glyphOrder = font.getGlyphOrder()
    for table in font["cmap"].tables:
        if table.isUnicode() and ord("Ж") in table.cmap:
            table.cmap[ord("Ж")] = glyph_of_zhe


def _generate(out: Path, fonts: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--fonts-dir", str(fonts), "--variants", "2", *extra],
        capture_output=True, text=True,
    )


@pytest.fixture(scope="module")
def fonts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fonts")
    for name in (*FAMILIES, BOLD):
        shutil.copy(DEJAVU / name, folder / name)
    _latin_only(folder / "LatinOnly.ttf")
    return folder


@pytest.fixture(scope="module")
def benchmark(fonts_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    out = tmp_path_factory.mktemp("out")
    first, second = out / "a.npz", out / "b.npz"
    runs = [_generate(first, fonts_dir), _generate(second, fonts_dir)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    return first, second, runs[0].stderr


def test_two_runs_give_the_same_bytes(benchmark: tuple[Path, Path, str]) -> None:
    first, second, _ = benchmark
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (first, second)]
    assert digest[0] == digest[1]


def test_classes_balance_shapes_and_family_split(benchmark: tuple[Path, Path, str], glyphs: ModuleType) -> None:
    path, _, stderr = benchmark
    data = load_arrays(path)
    assert data.class_names == EXPECTED_CLASSES
    assert [name for name, _, _ in glyphs.CLASSES] == EXPECTED_CLASSES
    with np.load(path, allow_pickle=False) as raw:
        fonts = {split: raw[f"fonts_{split}"].tolist() for split in ("train", "val", "test")}
        x_val, y_val = raw["x_val"], raw["y_val"]
    # Three design groups: one to each split. DejaVu Sans and its bold weight stay together; the
    # Latin-only font is left out of the whole benchmark, named on stderr.
    assert sorted(len(f) for f in fonts.values()) == [1, 1, 2]
    groups = {split: {name.split("[")[1].rstrip("]") for name in names} for split, names in fonts.items()}
    assert sorted(g for names in groups.values() for g in names) == ["DejaVu Sans", "DejaVu Sans Mono", "DejaVu Serif"]
    assert "skipped dir:LatinOnly.ttf: no glyph for" in stderr
    assert not any("LatinOnly" in name for names in fonts.values() for name in names)
    splits = {"train": (data.x_train, data.y_train), "test": (data.x_test, data.y_test),
              "val": (torch.from_numpy(x_val), torch.from_numpy(y_val))}
    for split, (x, y) in splits.items():
        per_class = 2 * len(fonts[split])  # --variants 2
        assert x.dtype == torch.uint8 and x.shape == (100 * per_class, 1, 32, 32)
        assert torch.equal(torch.bincount(y, minlength=100), torch.full((100,), per_class))
        # No blank image: every one has strong ink, and ink covers a real share of the box.
        flat = x.flatten(1)
        assert torch.equal(flat.amax(dim=1), torch.full((len(x),), 255, dtype=torch.uint8))
        assert int((flat >= 128).sum(dim=1).min()) >= 20
        # Fitted to the box: the ink's longer side spans at least 75% of the 30 pixels inside the margin.
        rows = (x[:, 0] > 0).any(dim=2).sum(dim=1)
        cols = (x[:, 0] > 0).any(dim=1).sum(dim=1)
        assert int(torch.maximum(rows, cols).min()) >= 22
    # The variants differ (random distortion), also between the two renders of one character.
    assert not torch.equal(data.x_train[0], data.x_train[1])


def test_mr2_reads_it_through_arrays(benchmark: tuple[Path, Path, str]) -> None:
    path, _, _ = benchmark
    bundle = build_datasets(DataSection("arrays", root=str(path), val_fraction=0.5,
                                        options={"regime": "mnist", "mean": [0.2], "std": [0.3]}))
    assert bundle.num_classes == 100 and bundle.input_shape == (1, 32, 32)
    image, target, _ = bundle.test[0]
    assert image.dtype == torch.float32 and 0 <= target < 100


def test_the_seed_changes_the_split_and_the_images(fonts_dir: Path, benchmark: tuple[Path, Path, str], tmp_path: Path) -> None:
    other = tmp_path / "seed1.npz"
    assert _generate(other, fonts_dir, "--seed", "1").returncode == 0
    base, _, _ = benchmark
    with np.load(base) as a, np.load(other) as b:
        assert a["x_train"].shape != b["x_train"].shape or not np.array_equal(a["x_train"], b["x_train"])


def test_font_problems(glyphs: ModuleType, tmp_path: Path) -> None:
    characters = "".join(members for _, members, _ in glyphs.CLASSES)
    assert glyphs.font_problem(DEJAVU / "DejaVuSans.ttf", characters) is None
    assert glyphs.font_problem(_latin_only(tmp_path / "latin.ttf"), characters).startswith("no glyph for ")
    assert glyphs.font_problem(_with_zhe_as(tmp_path / "notdef.ttf", ".notdef"), characters) == "no glyph for Ж"
    assert glyphs.font_problem(_with_zhe_as(tmp_path / "space.ttf", "space"), characters) == "blank glyph for Ж"
    assert glyphs.font_problem(_with_zhe_as(tmp_path / "tofu.ttf", "tofu"), characters) == ".notdef box (tofu) for Ж"
    (tmp_path / "junk.ttf").write_bytes(b"not a font")
    assert glyphs.font_problem(tmp_path / "junk.ttf", characters).startswith("unreadable: ")


@pytest.mark.parametrize(
    ("family", "group"),
    [
        ("Roboto Condensed", "Roboto"),
        ("CMU Sans Serif Demi Condensed", "CMU Sans Serif"),
        ("Noto Sans Display", "Noto Sans"),
        ("Open Sans Condensed", "Noto Sans"),
        ("Arimo", "Liberation Sans"),
        ("FreeSerif", "Nimbus Roman"),
        ("Nimbus Sans Narrow", "Nimbus Sans"),
        ("Linux Libertine Display O", "Linux Libertine O"),
        ("CMU Serif Upright Italic", "CMU Serif"),
        ("DejaVu Sans Mono", "DejaVu Sans Mono"),
        ("EB Garamond", "EB Garamond"),
    ],
)
def test_design_groups(glyphs: ModuleType, family: str, group: str) -> None:
    assert glyphs.design_group(family) == group


def test_split_groups(glyphs: ModuleType) -> None:
    groups = [f"g{i}" for i in range(10)]
    split = glyphs.split_groups(groups, seed=3)
    assert split == glyphs.split_groups(list(reversed(groups)), seed=3)
    assert sorted(split.values()) == ["test"] * 2 + ["train"] * 6 + ["val"] * 2
    assert split != glyphs.split_groups(groups, seed=4)


def test_errors_before_anything_is_written(glyphs: ModuleType, tmp_path: Path) -> None:
    one_design = tmp_path / "one"
    one_design.mkdir()
    for name in ("DejaVuSans.ttf", BOLD):
        shutil.copy(DEJAVU / name, one_design / name)
    out = tmp_path / "x.npz"
    run = _generate(out, one_design)
    assert run.returncode != 0 and not out.exists()
    assert run.stderr.strip() == glyphs.TOO_FEW_GROUPS.format(count=1, groups="DejaVu Sans")
    empty = tmp_path / "empty"
    empty.mkdir()
    run = _generate(out, empty)
    assert run.returncode != 0 and run.stderr.strip() == glyphs.NO_FONTS.format(found=0, count=100)
    run = _generate(tmp_path / "x.npy", one_design)
    assert run.stderr.strip() == glyphs.OUT_SUFFIX.format(out=tmp_path / "x.npy")
    with pytest.raises(SystemExit) as raised:
        glyphs.package_fonts(["fonts-dejavu-core", "fonts-mr2-no-such-package"])
    if shutil.which("dpkg-query") is None:
        assert str(raised.value) == glyphs.NO_DPKG.format(packages="fonts-dejavu-core fonts-mr2-no-such-package")
    else:
        assert str(raised.value) == glyphs.MISSING_PACKAGES.format(missing="fonts-mr2-no-such-package")
    assert list(tmp_path.glob("*.npz")) == [] and list(tmp_path.glob(".*.tmp")) == []
