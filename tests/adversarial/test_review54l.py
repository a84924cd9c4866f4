"""Review 54 (lead): leftovers of the stop's helper reports, each written as a test first."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpframe.errors import PluginError
from dpframe.mechanism.noise import Noise


@pytest.mark.parametrize("bad", [1.0, 0, -1, Fraction(-1, 2), True, "1"])
def test_noise_refuses_a_coordinate_sensitivity_that_is_not_a_positive_exact_number(bad: object) -> None:
    """Found by review 54a: ``Noise`` took any ``coordinate_sensitivity``. A float failed later, inside the plan's cost
    check, with an AttributeError; 0, negatives and True were accepted silently. Each is now a PluginError naming the
    argument when the noise is made."""
    with pytest.raises(PluginError, match="coordinate_sensitivity") as caught:
        Noise("discrete_laplace", Fraction(4), Fraction(4), coordinate_sensitivity=bad)  # type: ignore[arg-type]
    assert caught.value.argument == "coordinate_sensitivity"


def test_noise_keeps_a_whole_number_coordinate_sensitivity_as_a_fraction() -> None:
    noise = Noise("discrete_laplace", Fraction(4), Fraction(4), coordinate_sensitivity=1)  # type: ignore[arg-type]
    assert noise.coordinate_sensitivity == Fraction(1) and isinstance(noise.coordinate_sensitivity, Fraction)
    assert Noise("discrete_laplace", Fraction(4), Fraction(4)).coordinate_sensitivity is None
