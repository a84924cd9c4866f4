"""The mechanism-plugin contract: what a mechanism declares and how the core drives it."""

from dpframe.budgets import divide
from dpframe.mechanism.base import (
    LIST_KINDS,
    MAX_GRID_EXPONENT,
    MIN_GRID_EXPONENT,
    SUM_LIMIT,
    MeasureContext,
    Mechanism,
    MechanismPlan,
    Statistic,
    statistic_values,
)
from dpframe.mechanism.noise import Noise, sample_batch
from dpframe.mechanism.sorted_codes import SortedCodes

__all__ = ["LIST_KINDS", "MAX_GRID_EXPONENT", "MIN_GRID_EXPONENT", "SUM_LIMIT", "MeasureContext", "Mechanism",
           "MechanismPlan", "Noise", "SortedCodes", "Statistic", "divide", "sample_batch", "statistic_values"]
