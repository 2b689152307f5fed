"""One tune request: the candidates, the seeds, the criterion and where the tune directory goes,
validated once for every way in (``mr2 tune --config``, ``--command`` and :func:`mr2.tune.tune`).

What trains the trials is not part of the request: it is the trial source
(:mod:`mr2.tune.source`, :mod:`mr2.tune.engine_source`, :mod:`mr2.tune.command`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from mr2.checks import is_int
from mr2.config.names import check_name
from mr2.tune.candidates import (
    DEFAULT_CANDIDATE_SET,
    REFERENCE_LABEL,
    Candidate,
    check_candidate_set,
)
from mr2.tune.candidates import candidates as members
from mr2.tune.design import DEFAULT_DESIGN, Design, Plan, Request
from mr2.tune.errors import TuneInputError
from mr2.tune.loss_spec import parse_loss_spec
from mr2.tune.selection import CRITERIA
from mr2.tune.trials import Trial

__all__ = [
    "BAD_CANDIDATES",
    "BAD_NUM_CLASSES",
    "BAD_SEEDS",
    "ENGINE_ONLY_CANDIDATE",
    "MAX_CLASSES",
    "MAX_SEEDS",
    "OUTPUT_IS_FILE",
    "OVERLAPPING_SEEDS",
    "TOO_FEW_SEEDS",
    "TOO_MANY_SEEDS",
    "UNKNOWN_CRITERION",
    "TuneRequest",
    "check_report_memory",
    "make_request",
    "parse_seeds",
]

#: The largest number of classes accepted (the report's K x K confusion matrices).
MAX_CLASSES = 100_000
#: The most seeds ``--seeds`` or ``--confirm-seeds`` may ask for (checked before any list is built).
MAX_SEEDS = 1000

UNKNOWN_CRITERION = "unknown criterion {value!r}; choose one of: {choices}"
BAD_SEEDS = (
    "{flag} must be a count >= {minimum} or a comma-separated list of distinct seeds >= 0; got {value!r}"
)
TOO_FEW_SEEDS = "{flag} needs at least 2 seeds (the rule uses the seed standard error); got {count}"
TOO_MANY_SEEDS = (
    "{flag} asks for {count} seeds; at most {maximum} are allowed (every seed trains every candidate once)"
)
OVERLAPPING_SEEDS = (
    "selection seeds {selection} and confirmation seeds {confirmation} overlap in {common}; the "
    "confirmation must use fresh seeds"
)
BAD_NUM_CLASSES = "num_classes must be an integer from 2 to {maximum}; got {value!r}"
BAD_CANDIDATES = (
    "candidates must be 'quick', 'full' or a list of mr2.tune.Candidate with ERM ('erm') among them; "
    "got {value!r}"
)
ENGINE_ONLY_CANDIDATE = (
    "candidate {label!r} ({method}) needs mr2's engine (a two-stage procedure); with training code of "
    "your own the candidates must be losses (mr2.methods.spec.loss_methods()); use mr2 tune --config"
)
_REPORT_TOO_LARGE = (
    "num_classes {k}: the confirmation report would hold {trials} trials' test and validation K x K "
    "confusion matrices, {size}, more than this process can allocate now ({free}); use fewer "
    "--confirm-seeds, or free memory"
)
OUTPUT_IS_FILE = "{path} is a file; the tune directory goes there: give another --output-dir or --name"
_BAD_CLASS_NAMES = "class_names must be {num_classes} distinct non-empty strings; got {problem}"


@dataclass
class TuneRequest:
    """A validated tune.

    Attributes:
        candidates: the candidates, ERM first (each with ``num_classes`` set when it is known).
        candidate_set: ``quick``, ``full``, a comma-separated list of labels, or ``custom``.
        seeds: the selection seeds (the pool the design draws from, in order).
        confirm_seeds: the fresh confirmation seeds (the pool, in order; disjoint from ``seeds``).
        criterion: one of :data:`mr2.tune.selection.CRITERIA`.
        output_dir: where the tune directory goes.
        name: the tune directory's name.
        num_classes: K (None until the engine source has built the data).
        class_names: K names for the report, or None.
        design: the procedure's stated rule (:class:`mr2.tune.design.Design`).
    """

    candidates: list[Candidate]
    candidate_set: str
    seeds: list[int]
    confirm_seeds: list[int]
    criterion: str
    output_dir: str
    name: str
    num_classes: int | None = None
    class_names: list[str] | None = None
    design: Design = DEFAULT_DESIGN

    @property
    def directory(self) -> Path:
        return Path(self.output_dir) / self.name

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.candidates]

    def candidate(self, label: str) -> Candidate:
        return next(c for c in self.candidates if c.label == label)

    def plan(self) -> Plan:
        """A fresh plan of this tune's trials (:class:`mr2.tune.design.Plan`)."""
        return Plan(self.labels, reference=REFERENCE_LABEL, criterion=self.criterion,
                    selection_seeds=self.seeds, confirmation_seeds=self.confirm_seeds, design=self.design)

    def trial(self, item: Request) -> Trial:
        """The plan's request ``item`` bound to its candidate."""
        return Trial(item.phase, self.candidate(item.label), item.seed)

    def with_num_classes(self, num_classes: int) -> TuneRequest:
        """The request with K known (set on every candidate too)."""
        return replace(self, num_classes=num_classes,
                       candidates=[replace(c, num_classes=num_classes) for c in self.candidates])


def check_report_memory(request: TuneRequest, num_classes: int) -> None:
    """Refuse a K whose confirmation report cannot fit in memory, before any trial runs: the report
    holds a test and a validation K x K int64 confusion matrix per confirmation trial (at most
    ``(contenders + 1) x confirmation seeds`` of them).

    Raises:
        TuneInputError: the matrices would take more than this process can allocate now
            (:func:`mr2.report.limits.allocatable_bytes`; unknown: no check).
    """
    from mr2.report.limits import allocatable_bytes, confusion_bytes, format_bytes

    trials = request.plan().max_confirmation_trainings()
    needed = 2 * trials * confusion_bytes(num_classes)
    free = allocatable_bytes()
    if free is not None and needed > free:
        raise TuneInputError(_REPORT_TOO_LARGE.format(k=num_classes, trials=trials, size=format_bytes(needed),
                                                     free=format_bytes(free)))


def parse_seeds(value: str | int | Sequence[int] | None, flag: str, default: int,
                start: int = 0) -> list[int]:
    """Seeds from a count (``start .. start + n - 1``), a ``'S,S,...'`` string or a list of ints.

    Raises:
        TuneInputError: fewer than 2, more than :data:`MAX_SEEDS`, negative, repeated or not integers.

    Example:
        >>> parse_seeds("3", "--seeds", 3), parse_seeds("7,9", "--seeds", 3), parse_seeds(2, "s", 3, start=5)
        ([0, 1, 2], [7, 9], [5, 6])
    """
    if value is None:
        value = default
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        if isinstance(value, Sequence) and all(is_int(v) for v in value):
            value = ",".join(str(v) for v in value) if len(value) else "[]"
        else:
            raise TuneInputError(BAD_SEEDS.format(flag=flag, minimum=2, value=value))
    text = str(value).strip()
    if text.isdigit() and "," not in text:
        if len(text) > len(str(MAX_SEEDS)):  # before int(): a count of thousands of digits
            shown = text.lstrip("0") or "0"
            if len(shown) > len(str(MAX_SEEDS)):
                shown = shown if len(shown) <= 12 else shown[:12] + "..."
                raise TuneInputError(TOO_MANY_SEEDS.format(flag=flag, count=shown, maximum=MAX_SEEDS))
        count = int(text)
        if count > MAX_SEEDS:
            raise TuneInputError(TOO_MANY_SEEDS.format(flag=flag, count=count, maximum=MAX_SEEDS))
        if count < 2:
            raise TuneInputError(TOO_FEW_SEEDS.format(flag=flag, count=count))
        return list(range(start, start + count))
    parts = [part for part in text.split(",") if part.strip()]
    if len(parts) > MAX_SEEDS:
        raise TuneInputError(TOO_MANY_SEEDS.format(flag=flag, count=len(parts), maximum=MAX_SEEDS))
    try:
        seeds = [int(part) for part in parts]
    except ValueError:
        raise TuneInputError(BAD_SEEDS.format(flag=flag, minimum=2, value=value)) from None
    if any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise TuneInputError(BAD_SEEDS.format(flag=flag, minimum=2, value=value))
    if len(seeds) < 2:
        raise TuneInputError(TOO_FEW_SEEDS.format(flag=flag, count=len(seeds)))
    return seeds


def _custom_candidates(value: object) -> list[Candidate]:
    items = [c for c in value if isinstance(c, Candidate)] if isinstance(value, Sequence) else []
    labels = [c.label for c in items]
    if (not items or not isinstance(value, Sequence) or len(items) != len(value)
            or REFERENCE_LABEL not in labels or len(set(labels)) != len(labels)):
        raise TuneInputError(BAD_CANDIDATES.format(value=value))
    for candidate in items:
        check_name(candidate.label, "candidate label", TuneInputError)
        if not candidate.is_loss:
            raise TuneInputError(ENGINE_ONLY_CANDIDATE.format(label=candidate.label, method=candidate.method))
        parse_loss_spec(candidate.loss_spec())
    reference = next(c for c in items if c.is_reference)
    return [reference, *(c for c in items if not c.is_reference)]


def _class_names(value: Sequence[str] | None, num_classes: int | None) -> list[str] | None:
    if value is None:
        return None
    names = list(value) if not isinstance(value, str) else []
    problem = ""
    if num_classes is not None and len(names) != num_classes:
        problem = f"{len(names)} names"
    elif not all(isinstance(n, str) and n.strip() for n in names):
        problem = "an empty or non-string name"
    elif len(set(names)) != len(names):
        problem = "duplicates"
    if problem:
        raise TuneInputError(_BAD_CLASS_NAMES.format(num_classes=num_classes, problem=problem))
    return names


def make_request(
    *,
    output_dir: str | Path,
    name: str,
    candidates: str | Sequence[Candidate] = DEFAULT_CANDIDATE_SET,
    losses_only: bool = True,
    num_classes: int | None = None,
    seeds: str | int | Sequence[int] | None = None,
    confirm_seeds: str | int | Sequence[int] | None = None,
    criterion: str = "hard_tier",
    class_names: Sequence[str] | None = None,
    design: Design = DEFAULT_DESIGN,
) -> TuneRequest:
    """Validate a tune's arguments (counts give consecutive seeds; confirmation seeds start after the
    largest selection seed; at least 2 and at most :data:`MAX_SEEDS` each, disjoint). Without seeds,
    the pools are what the design uses at most (:data:`mr2.tune.design.DEFAULT_DESIGN`: 2 selection
    seeds, 17 confirmation seeds: 1 for the screen, 16 for the finalist; a shorter pool cuts its looks,
    and one shorter than 3 skips the screen).

    Args:
        losses_only: the candidates must be losses (training code of your own); False for mr2's
            engine, which also runs the two-stage procedures.
        num_classes: K; required with ``losses_only`` (your code), None for the engine (it knows K
            once the data is built).

    Raises:
        TuneInputError: the first problem found (before anything is written).
    """
    if (losses_only or num_classes is not None) and (
            not is_int(num_classes) or not 2 <= int(num_classes) <= MAX_CLASSES):
        raise TuneInputError(BAD_NUM_CLASSES.format(maximum=MAX_CLASSES, value=num_classes))
    if criterion not in CRITERIA:
        raise TuneInputError(UNKNOWN_CRITERION.format(value=criterion, choices=", ".join(CRITERIA)))
    if isinstance(candidates, str):
        check_candidate_set(candidates, losses_only=losses_only)
        chosen, set_name = members(candidates, losses_only=losses_only), candidates
    else:
        chosen, set_name = _custom_candidates(candidates), "custom"
    check_name(name, "name", TuneInputError)
    if Path(output_dir).is_file() or (Path(output_dir) / name).is_file():
        raise TuneInputError(OUTPUT_IS_FILE.format(path=Path(output_dir) if Path(output_dir).is_file()
                                                   else Path(output_dir) / name))
    selection = parse_seeds(seeds, "--seeds", design.selection_seeds)
    confirmation = parse_seeds(confirm_seeds, "--confirm-seeds", design.confirmation_seeds,
                               start=max(selection) + 1)
    common = sorted(set(selection) & set(confirmation))
    if common:
        raise TuneInputError(OVERLAPPING_SEEDS.format(selection=selection, confirmation=confirmation,
                                                      common=common))
    request = TuneRequest(chosen, set_name, selection, confirmation, criterion, str(output_dir), name,
                          class_names=_class_names(class_names, num_classes), design=design)
    if num_classes is None:
        return request
    check_report_memory(request, int(num_classes))
    return request.with_num_classes(int(num_classes))
