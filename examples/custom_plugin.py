"""A third-party mechanism plugin: the example histogram plugin in plugins/dpframe_histogram.

Plugins add measure kinds. Once the package is installed (it declares an entry point in the
``dpframe`` group), ``dp.measure("histogram", ...)`` is routed to it like any built-in measure.
Install it with:  pip install -e plugins/dpframe_histogram
"""

import os
import sys

import polars as pl

import dpframe as dp

data = dp.datasets.visits(50_000)
sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=5),
                  budget=dp.PureDP(1.0))

# A measure of a kind no built-in handles: bins [0, 18), [18, 65), [65, 100) of age.
ages = dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))

try:
    q = sess.table("visits").filter(pl.col("spend") > 20).agg(ages, dp.len())   # validated now: finds the mechanism
    print(q.explain(budget=dp.PureDP(0.5)))                                     # free
except dp.PluginError as e:
    print("No mechanism handles this measure: the histogram plugin is not installed", end="")
    blocked = os.environ.get("DPFRAME_BLOCK_PLUGINS")
    print(f" (or it is blocked: DPFRAME_BLOCK_PLUGINS={blocked})." if blocked else ".")
    print(" ", e)
    print("Install the example plugin and run this again:")
    print("  pip install -e plugins/dpframe_histogram   # then: dpframe plugins")
    sys.exit(0)

print(q.collect(budget=dp.PureDP(0.5)))
print("spent:", sess.spent())
