"""Metric-learning losses: the loss contract, similarity sources and the losses built on them."""

from losses.base import MetricLoss, PairSimilarityLoss
from losses.center import CenterLoss
from losses.circle import CircleLoss
from losses.contrastive import ContrastiveLoss
from losses.copernican import CopernicanLoss
from losses.external import ExternalLoss
from losses.lifted import LiftedStructureLoss
from losses.multi_similarity import MultiSimilarityLoss
from losses.npair import NPairLoss
from losses.proxy import AMSoftmaxLoss, ArcFaceLoss, CosFaceLoss, NormFaceLoss, SoftmaxLoss
from losses.similarity import BatchPairs, ClassProxies, SimilaritySource
from losses.triplet import TripletLoss
from losses.unified import UnifiedLoss

__all__ = [
    "AMSoftmaxLoss",
    "ArcFaceLoss",
    "BatchPairs",
    "CenterLoss",
    "CircleLoss",
    "ClassProxies",
    "ContrastiveLoss",
    "CopernicanLoss",
    "CosFaceLoss",
    "ExternalLoss",
    "LiftedStructureLoss",
    "MetricLoss",
    "MultiSimilarityLoss",
    "NPairLoss",
    "NormFaceLoss",
    "PairSimilarityLoss",
    "SimilaritySource",
    "SoftmaxLoss",
    "TripletLoss",
    "UnifiedLoss",
]
