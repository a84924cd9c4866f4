"""Bounds chosen privately per query (``max_rows="auto"``, ``bounds="auto"``) and diagnostics.

* :mod:`dpframe.tuning.grid`: the public candidate grids;
* :mod:`dpframe.tuning.shares`: how the query's budget is split (stated shares);
* :mod:`dpframe.tuning.choose`: the rules (least estimated bias + noise), post-processing only;
* :mod:`dpframe.tuning.stage`: the staged plan and run (proof sketch there);
* :mod:`dpframe.tuning.diagnostics`: ``collect(..., diagnostics=True)``.

See ``docs/bounds.md``.
"""

from dpframe.tuning.diagnostics import Diagnosed

__all__ = ["Diagnosed"]
