"""Execution backends: compile the stable part of a plan into one engine query returning statistics."""

from dpframe.backends.base import Backend, StatisticsRequest

__all__ = ["Backend", "StatisticsRequest"]
