"""``dp.TopKFailed`` / ``dp.NoAnswer``: the plugins' result types, exported lazily from ``dpframe``."""

from __future__ import annotations

import os
import subprocess
import sys

import polars as pl
import pytest

import dpframe as dp


def _python(code: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, **env})
    return done.stdout.strip()


def test_import_dpframe_loads_no_plugin_package():
    code = ("import sys, dpframe as dp\n"
            "print(sorted(m for m in sys.modules if m.startswith('dpframe_')))\n"
            "dp.TopKFailed, dp.NoAnswer\n"
            "print(sorted(m.split('.')[0] for m in sys.modules if m.startswith('dpframe_')))")
    before, after = _python(code).splitlines()
    assert before == "[]"
    assert "dpframe_topk" in after and "dpframe_learning" in after


def test_the_exported_types_are_the_plugins_classes():
    import dpframe_learning
    import dpframe_topk

    assert dp.TopKFailed is dpframe_topk.TopKFailed
    assert dp.NoAnswer is dpframe_learning.NoAnswer
    assert {"TopKFailed", "NoAnswer"} <= set(dir(dp))
    with pytest.raises(AttributeError, match="no attribute 'TopKFail'"):
        dp.TopKFail  # noqa: B018


def test_a_blocked_plugin_type_is_a_plugin_error():
    code = ("import dpframe as dp\ntry:\n    dp.TopKFailed\nexcept dp.PluginError as e:\n    print(e.fix)\n"
            "print(dp.NoAnswer.__name__)")
    fix, other = _python(code, DPFRAME_BLOCK_PLUGINS="topk").splitlines()
    assert "DPFRAME_BLOCK_PLUGINS" in fix and other == "NoAnswer"


def test_results_are_instances_of_the_exported_types():
    data = pl.DataFrame({"user": range(40), "city": ["a", "b"] * 20, "x": range(40)})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.ApproxDP(10, 1e-3), seed=0)
    failed = sess.table("t").group_by("city").top_k(k=None).collect(dp.ApproxDP(0.01, 1e-6))
    assert isinstance(failed, dp.TopKFailed) and not failed
    none = sess.table("t").interior_point("x", bounds=(0, 10**9)).collect(dp.PureDP(0.01))
    assert isinstance(none, dp.NoAnswer) and not none
