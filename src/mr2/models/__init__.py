"""Models that return ``(logits, features)``, and the wrapper that makes any classifier do so."""

from mr2.models.classifier import BackboneClassifier
from mr2.models.feature_cache import (
    CorruptFeatureCacheWarning,
    FeatureCache,
    FeatureCacheKey,
    extract_features,
)
from mr2.models.feature_capture import ClassifierWithFeatures, find_classifier
from mr2.models.linear_head import LinearHead
from mr2.models.mlp import MLP
from mr2.models.registry import MODEL_NAMES, build_model, feature_dim_of
from mr2.models.resnet_cifar import ResNetCifar, WideResNet, resnet32, wrn28_10
from mr2.models.small_cnn import SmallCNN
from mr2.models.weights import WeightsMismatchError, load_state_dict_file

__all__ = [
    "MLP",
    "MODEL_NAMES",
    "BackboneClassifier",
    "ClassifierWithFeatures",
    "CorruptFeatureCacheWarning",
    "FeatureCache",
    "FeatureCacheKey",
    "LinearHead",
    "ResNetCifar",
    "SmallCNN",
    "WeightsMismatchError",
    "WideResNet",
    "build_model",
    "extract_features",
    "feature_dim_of",
    "find_classifier",
    "load_state_dict_file",
    "resnet32",
    "wrn28_10",
]
