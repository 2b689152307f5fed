"""The one exception every data loader raises, and its messages.

Every message names the file (or directory) at fault and says how to fix it. The messages are
module constants (``str.format`` templates) so tests can assert on them exactly.
"""

from __future__ import annotations

import os

from mr2.errors import MR2Error

__all__ = [
    "ARRAY_BAD_DTYPE",
    "ARRAY_BAD_SHAPE",
    "ARRAY_FLOAT32_OVERFLOW",
    "ARRAY_LABEL_PAST_K",
    "ARRAY_LABEL_PAST_OTHERS",
    "ARRAY_MISSING_KEY",
    "ARRAY_NOT_BATCHED",
    "ARRAY_NOT_FINITE",
    "ARRAY_UNREADABLE",
    "BAD_DATA_OPTION",
    "CIFAR_BAD_ARRAY",
    "CIFAR_MISSING",
    "CIFAR_UNREADABLE",
    "CLASSES_DIFFER",
    "CLASS_NAMES_MISMATCH",
    "DOWNLOAD_NEEDS_ROOT",
    "EMPTY_CLASSES",
    "FASHION_MNIST_MISSING",
    "FINE_GRAINED_MISSING",
    "IDX_BAD_GZIP",
    "IDX_BAD_MAGIC",
    "IDX_TRAILING_BYTES",
    "IDX_TRUNCATED",
    "IMAGE_FOLDER_MISSING",
    "IMAGE_FOLDER_NO_CLASSES",
    "LABELS_NOT_INTEGER",
    "LABELS_OUT_OF_RANGE",
    "NO_SAMPLES",
    "ROOT_REQUIRED",
    "SHAPE_MISMATCH",
    "SIZE_MISMATCH",
    "UNKNOWN_DATASET",
    "UNKNOWN_DATA_OPTIONS",
    "UNKNOWN_REGIME",
    "UNSAFE_PICKLE",
    "DatasetError",
]


class DatasetError(MR2Error, ValueError):
    """A data set is missing, corrupt or inconsistent.

    Args:
        message: the full, user-facing message (it names the file and the fix).
        path: the file or directory at fault, if any.

    Example:
        >>> error = DatasetError("x.npz: broken", path="x.npz")
        >>> str(error), error.path
        ('x.npz: broken', 'x.npz')
    """

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)


# --- Shared by every format --------------------------------------------------------------------

LABELS_OUT_OF_RANGE = (
    "{path}: {what} must lie in [0, {num_classes}) but range from {low} to {high}. "
    "The file is corrupt or belongs to another data set; re-create or re-download it."
)
LABELS_NOT_INTEGER = (
    "{path}: {what} must be a 1-D integer array, got dtype {dtype} and shape {shape}. "
    "Store the class ids as int64 (0..K-1)."
)
EMPTY_CLASSES = (
    "{path}: class(es) {classes} have no training samples (out of {num_classes}). Every class "
    "needs training data: add samples of them, or drop them (a directory, or a gap in the "
    "class ids 0..K-1)."
)
NO_SAMPLES = "{path}: the {split} split has no samples. Add data to it."
SIZE_MISMATCH = (
    "{path}: {what} has {found} samples but {expected} were expected ({detail}). "
    "The files are truncated or do not belong together; re-create or re-download them."
)
SHAPE_MISMATCH = (
    "{path}: samples have shape {found} but {expected} was expected ({detail}). "
    "The files do not belong together; re-create or re-download them."
)
DOWNLOAD_NEEDS_ROOT = (
    "download: true needs a writable `root` to download {name} into (nothing was downloaded)."
)
CLASSES_DIFFER = (
    "{path}: the evaluation split's classes differ from the training split's ({detail}). Both "
    "splits must list the same classes (for an ImageFolder: the same class sub-directories)."
)
CLASS_NAMES_MISMATCH = (
    "{path}: {found} class names for {expected} classes. Give exactly one name per class id."
)
UNKNOWN_DATASET = "unknown data set {name!r}; choose one of: {choices}."
UNKNOWN_DATA_OPTIONS = (
    "data set {name!r} has no option(s) {keys}; its options are: {valid}. Fix or remove them in "
    "`data.options`."
)
UNKNOWN_REGIME = (
    "unknown transform regime {regime!r} in `data.options.regime` of data set {name!r}; choose one "
    "of: {choices}."
)
BAD_DATA_OPTION = "data set {name!r}: {error}. Fix `data.options`."
ROOT_REQUIRED = "data set {name!r} needs `root`: {what}."
UNSAFE_PICKLE = (
    "{path}: refusing to unpickle {global_name!r}: a data pickle may only hold dicts, lists, "
    "strings and numpy arrays. The file is not a data set file (or was tampered with); "
    "re-download it."
)

# --- Fashion-MNIST / IDX ------------------------------------------------------------------------

FASHION_MNIST_MISSING = (
    "Fashion-MNIST file {name} not found (looked in: {searched}). Install it with "
    "`apt-get install dataset-fashion-mnist` (files go to /usr/share/datasets/fashion-mnist), "
    "set `root` to a directory holding the four IDX files (gzipped or plain, or torchvision's "
    "FashionMNIST/raw layout), or set `download: true` with a writable `root` where internet "
    "is available."
)
IDX_BAD_MAGIC = (
    "{path}: magic number 0x{found:08X} where an IDX {kind} file has 0x{expected:08X}. "
    "The file is corrupt or not the one its name says; re-download it."
)
IDX_TRUNCATED = (
    "{path}: truncated IDX file: the header announces shape {shape} ({expected} bytes of data) "
    "but only {found} bytes follow. Re-download the file."
)
IDX_TRAILING_BYTES = (
    "{path}: IDX file has {extra} bytes after the {expected} bytes its header announces "
    "(shape {shape}). The file is corrupt; re-download it."
)
IDX_BAD_GZIP = "{path}: cannot decompress ({reason}). The download is incomplete; re-download it."

# --- CIFAR --------------------------------------------------------------------------------------

CIFAR_MISSING = (
    "{path} not found: expected torchvision's CIFAR-{version} python layout "
    "(`{folder}/` holding {files}) under `root`. Download and extract "
    "https://www.cs.toronto.edu/~kriz/{archive} into `root`, or set `download: true` where "
    "internet is available."
)
CIFAR_UNREADABLE = (
    "{path}: not a readable CIFAR pickle ({reason}). The file is truncated or corrupt; "
    "re-download the archive."
)
CIFAR_BAD_ARRAY = (
    "{path}: `data` must be a uint8 array of shape [N, 3072] (N images of 3x32x32), got "
    "dtype {dtype} and shape {shape}. The file is corrupt; re-download the archive."
)

# --- ImageFolder --------------------------------------------------------------------------------

IMAGE_FOLDER_MISSING = (
    "{path} not found: an ImageFolder data set needs `root/train/<class>/<image>` and "
    "`root/val/<class>/<image>` (or `root/test/...`). Point `root` at the directory holding "
    "`train/`."
)
IMAGE_FOLDER_NO_CLASSES = (
    "{path}: no image files found ({reason}). Put the images of each class in their own "
    "sub-directory: {path}/<class>/<image>.jpg (extensions: {extensions})."
)

# --- Fine-grained sets (torchvision) -----------------------------------------------------------

FINE_GRAINED_MISSING = (
    "{name}: could not read the data set under {path} ({reason}). Expected layout: {layout}. "
    "{how_to_get}"
)

# --- Array / feature files ----------------------------------------------------------------------

ARRAY_UNREADABLE = (
    "{path}: cannot read the array file ({reason}). The file is truncated or not a {kind} file; "
    "re-create it with {how}."
)
ARRAY_MISSING_KEY = (
    "{path}: missing key(s) {missing}; found {found}. An array file holds `x_train`, `y_train`, "
    "`x_test`, `y_test` (and optionally `class_names`)."
)
ARRAY_BAD_DTYPE = (
    "{path}: `{key}` has dtype {dtype}; inputs must be a floating or integer array. "
    "Convert it (e.g. to float32) before saving."
)
ARRAY_BAD_SHAPE = (
    "{path}: `{key}` has shape {shape} but `{other}` has shape {other_shape}; inputs of both "
    "splits must share the per-sample shape, with samples along the first axis."
)
ARRAY_NOT_BATCHED = (
    "{path}: `{key}` has shape {shape}; inputs need a sample axis and at least one more "
    "([N, d] features or [N, C, H, W] images)."
)
ARRAY_NOT_FINITE = (
    "{path}: `{key}` holds {count} NaN or infinite value(s). Clean or re-extract the features."
)
ARRAY_FLOAT32_OVERFLOW = (
    "{path}: `{key}` ({split} split) holds {count} value(s) beyond float32's range (largest magnitude "
    "{largest:.3g}; float32 ends near 3.4e38): they become infinite when converted to float32 for "
    "training. Rescale or standardise the inputs before saving them."
)
ARRAY_LABEL_PAST_K = (
    "{path}: `{key}` ({split} split) holds label {label} (first at index {index}; {count} sample(s) "
    "outside 0..{last}) but there are K = {num_classes} classes, one per entry of `class_names`. Fix "
    "the label(s), or add the missing class name(s) to `class_names`."
)
ARRAY_LABEL_PAST_OTHERS = (
    "{path}: `{key}` ({split} split) holds label {label} (first at index {index}; {count} sample(s)) "
    "while every other label lies in 0..{top}: without `class_names` K is taken as the largest label "
    "+ 1 = {num_classes}, which leaves class(es) {empty} without training samples. Fix the label "
    "(class ids are 0..K-1), or store `class_names` (one per class) to set K."
)
