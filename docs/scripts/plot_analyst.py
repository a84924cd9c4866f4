"""Generate the figures of docs/notebooks.md (docs/img/plot_*.png) with ``dpframe.plots``.

Needs matplotlib (the ``plot`` extra): ``pip install 'dpframe[plot]'`` then ``python docs/scripts/plot_analyst.py``.
The session is seeded so the figures do not change from one build to the next (a real analysis never seeds).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import polars as pl  # noqa: E402

import dpframe as dp  # noqa: E402
from dpframe import accounting as acc  # noqa: E402

IMG = Path(__file__).resolve().parents[1] / "img"


def main() -> None:
    """Draw and save the three figures."""
    sess = dp.Session({"visits": dp.datasets.visits(20_000)}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=10),
                      budget=dp.ApproxDP(3, 1e-6), seed=1)
    q = sess.table("visits").group_by("city", keys=list(dp.datasets.CITIES[:6])).agg(dp.len())
    half = q.explain(dp.PureDP(0.1), format="json")["measures"][0]["ci95"]
    released = q.collect(dp.PureDP(0.1)).with_columns(len_ci_low=pl.col("len") - half, len_ci_high=pl.col("len") + half)
    for eps in (0.25, 0.5, 0.25):
        sess.table("visits").agg(dp.mean("age", bounds=(0, 100))).collect(dp.PureDP(eps))
    rdp = acc.RDPAccountant().compose(acc.gaussian(sigma=5.0), times=50)
    pld = acc.PLDAccountant().compose(acc.gaussian(sigma=5.0), times=50)
    for name, draw in (("estimates", lambda: dp.plots.estimates(released, "len")),
                       ("budget", lambda: dp.plots.budget(sess)),
                       ("privacy_curve", lambda: dp.plots.privacy_curve({"50 Gaussians σ=5, RDP": rdp,
                                                                         "50 Gaussians σ=5, PLD": pld}))):
        ax = draw()
        ax.set_title(name.replace("_", " "))
        ax.figure.tight_layout()
        ax.figure.savefig(IMG / f"plot_{name}.png", dpi=90)
        print(f"wrote {IMG / f'plot_{name}.png'}")


if __name__ == "__main__":
    main()
