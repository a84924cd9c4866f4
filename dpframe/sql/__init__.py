"""SQL for dpframe: ``sess.sql("SELECT ...")`` in the DuckDB dialect, lowered into the same plan.

Parsing uses DuckDB's own parser (``json_serialize_sql``); the parse tree is checked against an
allow-list and lowered into dpframe plan nodes (see ``docs/sql.md``). User SQL is never handed to a
database as is: only validated row-level expressions (re-rendered from the checked tree) and the
post-processing of released values ever run.

The package imports nothing at load time (``import dpframe`` must not pay for DuckDB): the entry
points are :func:`dpframe.sql.query.sql_query` (behind ``Session.sql``) and :mod:`dpframe.sql.cli`.
"""
