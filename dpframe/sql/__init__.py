"""SQL for dpframe: ``sess.sql("SELECT ...")`` in the DuckDB dialect, lowered into the same plan.

Parsing uses DuckDB's own parser (``json_serialize_sql``); the parse tree is checked against an
allow-list and lowered into dpframe plan nodes (see ``docs/sql.md``). User SQL is never handed to a
database as is: only validated row-level expressions (re-rendered from the checked tree) and the
post-processing of released values ever run.
"""

from dpframe.sql.query import SQLQuery, sql_query

__all__ = ["SQLQuery", "sql_query"]
