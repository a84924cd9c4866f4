"""Fixtures for the SQL tests (shared data and helpers live in ``sql_testkit``)."""

from __future__ import annotations

import pytest
from sql_testkit import make_session

import dpframe as dp


@pytest.fixture
def sess() -> dp.Session:
    return make_session()
