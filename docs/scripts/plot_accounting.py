"""Generate docs/img/accounting.png: ε at δ = 1e-6 vs number of queries, per accountant.

k Gaussian releases (σ = 20) and k Laplace releases (b = 20), alternating. Needs matplotlib (the
``docs`` extra): ``pip install 'dpframe[docs]'`` then ``python docs/scripts/plot_accounting.py``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dpframe import accounting as acc  # noqa: E402

DELTA = 1e-6
KS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]


def epsilon(name: str, k: int) -> float:
    """ε at DELTA of k alternating Gaussian and Laplace releases by accountant ``name``."""
    a = {"basic": acc.BasicAccountant, "zcdp": acc.ZCDPAccountant, "rdp": acc.RDPAccountant,
         "pld": acc.PLDAccountant}[name]()
    a.compose(acc.gaussian(sigma=20.0), times=(k + 1) // 2)
    if k // 2:
        a.compose(acc.laplace(scale=20.0), times=k // 2)
    return a.epsilon(delta=DELTA)


def main() -> None:
    """Draw and save the figure."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, style in [("basic", "o-"), ("zcdp", "s-"), ("rdp", "^-"), ("pld", "d-")]:
        ax.plot(KS, [epsilon(name, k) for k in KS], style, label=name, markersize=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of queries (Gaussian σ=20 and Laplace b=20, alternating)")
    ax.set_ylabel(f"ε at δ = {DELTA:g}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="accountant")
    out = Path(__file__).resolve().parents[1] / "img" / "accounting.png"
    out.parent.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
