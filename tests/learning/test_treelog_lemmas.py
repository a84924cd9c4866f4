"""TreeLog (experimental): brute-force checks of the two lemmas proven in docs/learning.md, on the
implementation's own heavy path and labels, and the experimental label (never chosen by method='auto')."""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from dpframe_learning.interior_point import TreeLog, _heavy_path, _labels

import dpframe as dp

BITS = 4           # a 16-leaf tree


def _slices(codes: list[int], t: int) -> tuple[Counter, Counter]:
    """(S_d codes, remaining labels) of one TreeLog level on the sorted multiset ``codes`` (as in solve())."""
    x = np.sort(np.asarray(codes, dtype=np.int64))
    _, leaf = _heavy_path(x, BITS)
    labels = _labels(x, leaf, BITS)
    order = np.lexsort((-x, -labels))                  # deepest labels first, then codes descending
    return Counter(x[order[:2 * t]].tolist()), Counter(labels[order[2 * t:]].tolist())


def _multisets(size: int) -> list[list[int]]:
    return [list(c) for c in itertools.combinations_with_replacement(range(2**BITS), size)]


def test_lemma_1_gamma_is_monotone_with_sensitivity_one() -> None:
    for size in range(5):
        for a in _multisets(size):
            gamma = _heavy_path(np.asarray(sorted(a), dtype=np.int64), BITS)[0]
            for x in range(2**BITS):
                after = _heavy_path(np.asarray(sorted([*a, x]), dtype=np.int64), BITS)[0]
                assert gamma <= after <= gamma + 1, (a, x)


@pytest.mark.parametrize("t", [1, 2])
def test_lemma_2_relabelled_rest_stays_neighbouring_when_gamma_is_below_t(t: int) -> None:
    """Every multiset of ≤ 4 codes and 1500 random ones of 5–14 codes, each with every added code x."""
    gen = np.random.default_rng(t)
    cases = [a for size in range(5) for a in _multisets(size)]
    cases += [gen.integers(0, 2**BITS, int(gen.integers(5, 15))).tolist() for _ in range(1500)]
    broken = 0
    for a in cases:
        gamma = _heavy_path(np.asarray(sorted(a), dtype=np.int64), BITS)[0]
        sd_a, rest_a = _slices(a, t)
        for x in range(2**BITS):
            sd_b, rest_b = _slices([*a, x], t)
            neighbours = not (rest_a - rest_b) and (rest_b - rest_a).total() <= 1
            one_swap = (sd_b - sd_a).total() <= 1 and (sd_a - sd_b).total() <= 1
            if gamma < t:
                assert neighbours and one_swap, (a, x)
            broken += not neighbours
    assert broken > 0          # the premise matters: with Γ ≥ t the relabelled rests can differ by more


class _Cheap:
    """A plugin-style method that claims to need 1 row, marked experimental: 'auto' must not pick it."""

    name = "cheap_experimental"
    approximate = False
    experimental = True

    def min_rows(self, epsilon: Fraction, delta: Fraction, beta: float, size: int, stability: object) -> int:
        return 1

    def cost(self, epsilon: Fraction, delta: Fraction) -> dp.Budget:
        return dp.PureDP(epsilon)

    def run(self, codes: np.ndarray, size: int, epsilon: Fraction, delta: Fraction, beta: float,
            stability: object, rng: object) -> int:
        return int(codes[0])


def test_experimental_methods_are_never_picked_by_auto() -> None:
    from dpframe.plugin import PluginHost

    host = PluginHost()

    class Methods:
        @dp.hookimpl
        def dpframe_methods(self, register) -> None:  # noqa: ANN001
            register(_Cheap(), family="interior_point")

    host.pm.register(Methods(), name="third-party")
    sess = dp.Session({"t": pl.DataFrame({"x": list(range(500))})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ApproxDP(10, 1e-5))
    sess._plugins = host
    auto = sess.table("t").interior_point("x", bounds=(0, 1000))
    assert auto.plan(dp.ApproxDP(1, 1e-6)).mechanisms == "noisy count + exponential"
    assert "1 rows (experimental: never chosen by method='auto')" in auto.explain(dp.ApproxDP(1, 1e-6))
    named = sess.table("t").interior_point("x", bounds=(0, 1000), method="treelog")
    assert named.plan(dp.ApproxDP(1, 1e-6)).mechanisms == "noisy count + treelog (experimental)"
    assert "EXPERIMENTAL" in named.explain(dp.ApproxDP(1, 1e-6))
    assert TreeLog.experimental
