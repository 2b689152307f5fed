"""The configurations ``mr2 tune`` compares: ERM, MR2 variants and baselines, as sweep entries.

``quick``: ERM and the MR2 variants ``paper``, ``logit_only`` and ``distance_1d`` at ``c_bar = 1``
(3 candidates against ERM). ``full``: ERM, those three variants at ``c_bar`` in {0.5, 1, 2},
``additive_margin`` at ``margin_scale`` in {0.25, 0.5, 1}, and the baselines of
:data:`FULL_BASELINES` at their documented defaults (17 candidates against ERM).
:data:`DEFAULT_CANDIDATE_SET` is used when none is given. A candidate is a plain method entry of a
sweep (:mod:`mr2.sweep`); nothing here runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mr2.tune.errors import TuneInputError
from mr2.tune.loss_spec import SpecLoss, loss_from_spec

__all__ = [
    "CANDIDATE_SETS",
    "DEFAULT_CANDIDATE_SET",
    "FULL_BASELINES",
    "FULL_C_BARS",
    "FULL_MARGIN_SCALES",
    "FULL_VARIANTS",
    "NO_NUM_CLASSES",
    "QUICK_VARIANTS",
    "REFERENCE_LABEL",
    "Candidate",
    "candidates",
    "check_candidate_set",
]

#: The label of the reference candidate (plain cross-entropy).
REFERENCE_LABEL = "erm"
#: Variants of ``quick``, each at ``c_bar = 1``.
QUICK_VARIANTS = ("paper", "logit_only", "distance_1d")
#: Methods of ``full`` besides MR2, each at its defaults: the reviewers' baselines (center loss,
#: one-stage SupCon, hardness-based resampling) and the two that lifted hard classes on the reference
#: protocol (JTT, class-level group DRO).
FULL_BASELINES = ("jtt", "group_dro", "center_loss", "supcon", "hbr")
#: ``c_bar`` values of ``full``.
FULL_C_BARS = (0.5, 1.0, 2.0)
#: ``additive_margin``'s margins do not depend on ``c_bar`` (Delta_y = m gamma_y / mean gamma), so
#: ``full`` varies its scale ``m`` (``margin_scale``, logit units) instead.
FULL_MARGIN_SCALES = (0.25, 0.5, 1.0)


#: Variants of ``full``: those of ``quick`` and the additive-margin form.
FULL_VARIANTS = (*QUICK_VARIANTS, "additive_margin")
#: The candidate sets ``--candidates`` accepts.
CANDIDATE_SETS = ("quick", "full")
#: The set ``mr2 tune`` and :func:`mr2.tune.tune` use when none is given: ``full``, chosen by the rule
#: of docs/benchmarks/tune-track-record.md (stated before its 20 tunes; mean regret over 10 cells 0.55
#: against ``quick``'s 0.81, no hard-tier harm; docs/tune.md, "Which set is the default").
DEFAULT_CANDIDATE_SET = "full"
_BAD_CANDIDATE_SET = (
    "unknown candidate set {value!r}; choose quick, full, or a comma-separated list of candidate labels "
    "with erm among them, from: {labels}"
)
_REPEATED = "--candidates lists {labels} more than once; give each candidate label once"
_UNKNOWN_LABELS = "--candidates names unknown candidate(s) {unknown}; the labels are: {labels}"
_NEEDS_ENGINE = (
    "candidate(s) {labels} need mr2's engine (two-stage procedures): they run through mr2 tune --config "
    "only"
)
NO_NUM_CLASSES = (
    "candidate {label!r} does not know the number of classes: call make_loss(num_classes=K) (mr2.tune.tune "
    "sets it on the candidates it hands to your training function)"
)


@dataclass(frozen=True)
class Candidate:
    """One configuration to compare: a sweep entry label, a method and its options.

    For training code of your own (``mr2.tune.tune``, ``mr2 tune --command``) a candidate is a loss:
    :meth:`make_loss` builds it (an ``nn.Module`` called as ``loss(logits, features, target)``), and
    :meth:`loss_spec` is its JSON form for :func:`mr2.tune.loss_from_spec`.

    Attributes:
        label: its name in tables, directories and ``recommendation.json``.
        method: the training method (:mod:`mr2.methods`).
        options: the method's options.
        num_classes: K, set by ``mr2.tune.tune`` on the candidates it hands to ``train_fn`` (so
            :meth:`make_loss` needs no argument there); not part of equality.

    Example:
        >>> [c.label for c in candidates("quick")]
        ['erm', 'mr2-paper-c1', 'mr2-logit_only-c1', 'mr2-distance_1d-c1']
        >>> candidates("quick")[2].entry()
        {'method.name': 'mr2', 'method.options.variant': 'logit_only', 'method.options.c_bar': 1.0}
        >>> candidates("quick")[2].loss_spec()
        {'method': 'mr2', 'options': {'variant': 'logit_only', 'c_bar': 1.0}}
    """

    label: str
    method: str
    options: dict[str, Any] = field(default_factory=dict)
    num_classes: int | None = field(default=None, compare=False, repr=False)

    @property
    def is_reference(self) -> bool:
        return self.label == REFERENCE_LABEL

    @property
    def is_loss(self) -> bool:
        """Whether the candidate is a loss module, so training code of your own can run it (the
        two-stage procedures JTT, HBR and LfF need mr2's engine)."""
        from mr2.methods.registry import method_class

        return method_class(self.method).plain_loss

    @property
    def needs_features(self) -> bool:
        """Whether its loss reads the features (penultimate layer) besides the logits."""
        from mr2.methods.registry import method_class

        return method_class(self.method).reads_features

    def loss_spec(self) -> dict[str, Any]:
        """The JSON-able loss specification (:func:`mr2.tune.loss_from_spec` turns it into the loss), with
        ``num_classes`` when the candidate knows K (so ``loss_from_spec(spec)`` needs nothing more)."""
        spec: dict[str, Any] = {"method": self.method, "options": dict(self.options)}
        return spec if self.num_classes is None else {**spec, "num_classes": self.num_classes}

    def make_loss(self, num_classes: int | None = None, *, feature_dim: int | None = None,
                  class_counts: Any = None) -> SpecLoss:
        """The candidate's loss module (:func:`mr2.tune.loss_from_spec` of :meth:`loss_spec`).

        Args:
            num_classes: K (default: the candidate's ``num_classes``, set by ``mr2.tune.tune``).
            feature_dim: the features' width (required by SupCon, whose projection head has parameters
                your optimiser must include: ``[*model.parameters(), *loss.parameters()]``).
            class_counts: [K] training samples per class (group DRO with ``adjustment > 0`` only).

        Raises:
            TuneInputError: no ``num_classes``, a candidate that needs mr2's engine, or what
                :func:`mr2.tune.loss_from_spec` refuses.
        """
        if num_classes is None:
            num_classes = self.num_classes
        if num_classes is None:
            raise TuneInputError(NO_NUM_CLASSES.format(label=self.label))
        return loss_from_spec(self.loss_spec(), num_classes, feature_dim=feature_dim,
                              class_counts=class_counts)

    @staticmethod
    def seed_everything(seed: int) -> None:
        """Seed Python's ``random``, NumPy and torch (CPU and every GPU) with ``seed``, as ``mr2 train``
        does: call it first in your training function so a trial is reproducible."""
        from mr2.engine.runtime import seed_everything

        seed_everything(int(seed), deterministic=False)

    def entry(self) -> dict[str, Any]:
        """The sweep method entry (dotted keys -> fixed values)."""
        return {"method.name": self.method, **{f"method.options.{k}": v for k, v in self.options.items()}}

    def method_block(self) -> dict[str, Any]:
        """The ``method:`` section of a run configuration that trains this candidate."""
        return {"name": self.method, "options": dict(self.options)}


def _mr2(variant: str, c_bar: float) -> Candidate:
    return Candidate(f"mr2-{variant}-c{c_bar:g}", "mr2", {"variant": variant, "c_bar": c_bar})


def _additive(scale: float) -> Candidate:
    return Candidate(
        f"mr2-additive_margin-m{scale:g}", "mr2",
        {"variant": "additive_margin", "margin_scale": scale},
    )


def check_candidate_set(value: str, *, losses_only: bool = False) -> str:
    """Return ``value`` if it names candidates: ``quick``, ``full``, or a comma-separated list of labels
    of ``full``'s candidates with ``erm`` among them (e.g. ``erm,mr2-logit_only-c1``).

    Raises:
        TuneInputError: anything else (the message lists the choices); with ``losses_only``, also a
            label of a candidate that needs mr2's engine.
    """
    if value in CANDIDATE_SETS:
        return value
    labels = [part.strip() for part in str(value).split(",")]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise TuneInputError(_REPEATED.format(labels=", ".join(repeated)[:200]))
    pool = {c.label: c for c in candidates("full")}
    allowed = [label for label, c in pool.items() if c.is_loss or not losses_only]
    unknown = [label for label in labels if label not in allowed]
    if "," in str(value) and REFERENCE_LABEL in labels and unknown and not any(u in pool for u in unknown):
        raise TuneInputError(_UNKNOWN_LABELS.format(unknown=", ".join(unknown)[:200],
                                                    labels=", ".join(allowed)))
    if "," not in str(value) or unknown or REFERENCE_LABEL not in labels or len(set(labels)) != len(labels):
        engine = [label for label in unknown if label in pool]
        if engine:
            raise TuneInputError(_NEEDS_ENGINE.format(labels=", ".join(engine)))
        raise TuneInputError(_BAD_CANDIDATE_SET.format(value=str(value)[:200], labels=", ".join(allowed)))
    return value


def candidates(name: str, *, losses_only: bool = False) -> list[Candidate]:
    """The candidates of set ``name`` (``quick``, ``full`` or a list of labels, see
    :func:`check_candidate_set`), ERM first.

    ``losses_only``: only the candidates that are a loss module (:attr:`Candidate.is_loss`), the ones
    training code of your own can run: ``full`` without JTT and HBR.
    """
    if losses_only:
        return [c for c in candidates(name) if c.is_loss]
    if name not in CANDIDATE_SETS:
        labels = [part.strip() for part in name.split(",")]
        pool = {c.label: c for c in candidates("full")}
        if REFERENCE_LABEL not in labels or not all(label in pool for label in labels):
            raise ValueError(name)
        return [pool[REFERENCE_LABEL], *(pool[label] for label in labels if label != REFERENCE_LABEL)]
    erm = Candidate(REFERENCE_LABEL, "erm")
    if name == "quick":
        return [erm, *(_mr2(variant, 1.0) for variant in QUICK_VARIANTS)]
    mr2 = [
        _additive(scale) if variant == "additive_margin" else _mr2(variant, value)
        for variant in FULL_VARIANTS
        for value, scale in zip(FULL_C_BARS, FULL_MARGIN_SCALES, strict=True)
    ]
    return [erm, *mr2, *(Candidate(method, method) for method in FULL_BASELINES)]
