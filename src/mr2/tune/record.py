"""``recommendation.json``: one typed record for every way into ``mr2 tune``.

The top-level ``label``, ``method``, ``options`` and ``loss_spec`` are the configuration to USE: the
adopted candidate when ``adopt`` is true, ERM otherwise, so automation that trains what the record
names does what the printed advice says. What selection chose and why is kept apart (``chosen``,
``selection``, ``advice``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mr2.tune.candidates import Candidate

__all__ = ["RECOMMENDATION_FILE", "TuneRecord", "configuration"]

RECOMMENDATION_FILE = "recommendation.json"


def configuration(candidate: Candidate) -> dict[str, Any]:
    """A candidate as the record holds it: label, method, options and loss specification."""
    return {"label": candidate.label, "method": candidate.method, "options": dict(candidate.options),
            "loss_spec": candidate.loss_spec()}


@dataclass
class TuneRecord:
    """The content of ``recommendation.json``.

    Attributes:
        adopt: whether to adopt ``use`` instead of ERM (the advice, decided at a stated error rate).
        use: the configuration to use (:func:`configuration`): the adopted one, else ERM.
        chosen: the configuration selection sent to the confirmation (None: none was).
        reason: why (:data:`mr2.tune.design.REASONS`).
        criterion: the selection criterion.
        rule: the rule in words.
        design: the design's parameters (:meth:`mr2.tune.design.Design.to_dict`).
        candidate_set: ``quick``, ``full``, a list of labels or ``custom``.
        source: what trained the trials (``{"kind": "engine" | "python" | "command", ...}``).
        num_classes: K.
        selection: the selection's seeds, split and figures (:meth:`mr2.tune.selection.Choice.to_dict`).
        failed: candidate label -> ``{"phase", "seed", "reason", "log"}`` of its failed trial.
        confirmation: the confirmation's seeds, split, report path, figures and report error.
        verdict: the deciding verdict (:meth:`mr2.tune.verdict.Verdict.to_dict`), or None.
        advice: the plan's advice (:meth:`mr2.tune.design.Advice.to_dict`).
        trainings: trials trained (or reused) in all.
        base_config: the engine's run configuration (None for your own code).
        mr2_version, git_commit: what wrote the record.
    """

    adopt: bool
    use: dict[str, Any]
    chosen: dict[str, Any] | None
    reason: str
    criterion: str
    rule: str
    design: dict[str, Any]
    candidate_set: str
    source: dict[str, Any]
    num_classes: int | None
    selection: dict[str, Any]
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)
    confirmation: dict[str, Any] = field(default_factory=dict)
    verdict: dict[str, Any] | None = None
    advice: dict[str, Any] = field(default_factory=dict)
    trainings: int = 0
    base_config: dict[str, Any] | None = None
    mr2_version: str = ""
    git_commit: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object; ``label``, ``method``, ``options``, ``loss_spec`` and
        ``recommendation_is_erm`` are those of ``use`` (the keys older readers know)."""
        return {
            "adopt": self.adopt,
            "label": self.use["label"],
            "method": self.use["method"],
            "options": self.use["options"],
            "loss_spec": self.use["loss_spec"],
            "recommendation_is_erm": not self.adopt,
            "use": self.use,
            "chosen": self.chosen,
            "reason": self.reason,
            "criterion": self.criterion,
            "rule": self.rule,
            "design": self.design,
            "candidate_set": self.candidate_set,
            "source": self.source,
            "num_classes": self.num_classes,
            "selection": self.selection,
            "failed": self.failed,
            "confirmation": self.confirmation,
            "verdict": self.verdict,
            "advice": self.advice,
            "trainings": self.trainings,
            "base_config": self.base_config,
            "mr2_version": self.mr2_version,
            "git_commit": self.git_commit,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TuneRecord:
        """Read a record written by this mr2 (its keys; those of :meth:`to_dict` that are no field,
        ``label`` to ``recommendation_is_erm``, are left out)."""
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})
