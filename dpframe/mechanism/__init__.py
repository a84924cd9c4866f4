"""The mechanism-plugin contract: what a mechanism declares and how the core drives it."""

from dpframe.mechanism.base import MeasureContext, Mechanism, MechanismPlan, Statistic
from dpframe.mechanism.noise import Noise

__all__ = ["MeasureContext", "Mechanism", "MechanismPlan", "Noise", "Statistic"]
