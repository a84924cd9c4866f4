"""The SQL commands of the ``dpframe`` command line: ``query``, ``explain``, ``budget`` and ``serve``.

::

    dpframe query "SELECT city, COUNT(*) AS n FROM visits GROUP BY city"
        --table visits=data/visits.parquet --privacy-unit user_id --max-rows 10
        --epsilon 1 [--delta 1e-6] [--ledger budget.ledger] [--format table|csv|json]
    dpframe explain "SELECT ..." <same arguments>      # spends nothing
    dpframe budget --ledger budget.ledger               # total, spent, remaining, unit, tables
    dpframe serve --table visits=data/visits.parquet --privacy-unit user_id --max-rows 10
        --total-epsilon 4 --ledger budget.ledger --address 127.0.0.1:7070 --authkey-file key.txt

The total budget: a ledger file remembers the total it was created with (its ``meta`` table), so later
commands only name the ledger. The first command on a new ledger must give it with ``--total-epsilon``
(and ``--total-delta`` / ``--total-rho``). Without a ledger the total is ``--total-*`` or, if absent,
just this query's budget (a one-shot session). The ledger also records the privacy unit and the tables
(names and schemas) and refuses a command that names others. Exit codes: 0 success, 2 bad input (or any other error),
3 not enough budget; errors are one line on stderr, never a traceback. ``explain --format`` is ``table``
(text) or ``json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import ssl
import stat
import sys
import warnings
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

import polars as pl

import dpframe as dp
from dpframe.accounting import Ledger
from dpframe.accounting.binding import describe_meta
from dpframe.accounting.ledger import decode
from dpframe.aggregate import confidence
from dpframe.budgets import Budget, describe
from dpframe.plugin import plugin_host
from dpframe.privacy_unit import PIN_FIX
from dpframe.tuning.diagnostics import Diagnosed

COMMANDS = ("query", "explain", "budget", "serve")
EXIT_INPUT, EXIT_BUDGET = 2, 3


class CLIError(Exception):
    """Bad command-line input (exit code 2)."""


def _one_line_error(parser: argparse.ArgumentParser) -> Any:
    def error(message: str) -> NoReturn:
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_INPUT)
    return error


def _pair(text: str, what: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise CLIError(f"{what} must look like NAME=VALUE, got {text!r}")
    return name, value


def add_commands(sub: Any) -> None:
    """Add ``query``, ``explain``, ``budget`` and ``serve`` to the ``dpframe`` subcommands."""
    for name, text in (("query", "run a private SQL query (charges the budget)"),
                       ("explain", "show a SQL query's plan, cost and accuracy (spends nothing)")):
        p = sub.add_parser(name, help=text, description=text)
        p.error = _one_line_error(p)  # type: ignore[method-assign]
        p.add_argument("sql", help="the SELECT query (DuckDB dialect)")
        _session_arguments(p)
        p.add_argument("--epsilon", type=float, help="this query's ε")
        p.add_argument("--delta", type=float, default=0.0, help="this query's δ (default 0)")
        p.add_argument("--rho", type=float, help="this query's zCDP ρ (instead of --epsilon)")
        formats = ("table", "csv", "json") if name == "query" else ("table", "json")   # a plan is text or JSON
        p.add_argument("--format", choices=formats, default="table", help="output format")
        if name == "query":     # collect(budget, ci=..., diagnostics=True)
            p.add_argument("--ci", type=_ci, metavar="LEVEL",
                           help="also release <column>_ci_low / <column>_ci_high for each measure that has intervals, "
                                "at this confidence level, e.g. 0.95 (free: the same noisy values)")
            p.add_argument("--diagnostics", action="store_true",
                           help="spend 1/10 of this query's budget on noisy counts of the rows and values bounding "
                                "left out (printed after the result; on stderr with --format csv or json)")
    text = "serve a session to analysts in other processes (dp.connect), until interrupted"
    s = sub.add_parser("serve", help=text, description=text)
    s.error = _one_line_error(s)  # type: ignore[method-assign]
    _session_arguments(s)
    s.add_argument("--address", required=True, metavar="HOST:PORT|PATH",
                   help="where to listen: HOST:PORT for TCP, or the path of a Unix socket")
    s.add_argument("--authkey-file", required=True, metavar="PATH",
                   help="a file holding the shared key (its text, stripped; at least 16 bytes)")
    s.add_argument("--tls-cert", metavar="PEM", help="encrypt TCP with TLS: the server's certificate chain")
    s.add_argument("--tls-key", metavar="PEM", help="the certificate's private key (if not in --tls-cert)")
    s.add_argument("--idle-timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="disconnect a client silent this long, closing the tools it holds (0: never; default 3600)")
    s.add_argument("--stream-idle", type=float, default=60.0, metavar="SECONDS",
                   help="close a sparse vector or channel a client has not used this long when another client asks "
                        "for one (0: never; default 60)")
    s.add_argument("--pad", type=float, default=0.0, metavar="SECONDS",
                   help="send each release this long after its request came (or 2x, 4x ... if it ran longer), so "
                        "that its time tells nothing (0: off, the default)")
    b = sub.add_parser("budget", help="show a ledger's total, spent and remaining budget")
    b.error = _one_line_error(b)  # type: ignore[method-assign]
    b.add_argument("--ledger", metavar="PATH", required=True, help="the ledger file")
    b.add_argument("--format", choices=("table", "json"), default="table", help="output format")


def _session_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments that describe a session: its tables, privacy unit, total budget and ledger."""
    p.add_argument("--table", action="append", default=[], metavar="NAME=PATH", required=True,
                   help="a private table: a .parquet or .csv file (repeat for several)")
    p.add_argument("--public-table", action="append", default=[], metavar="NAME=PATH",
                   help="a public lookup table the query may JOIN with")
    unit = p.add_mutually_exclusive_group(required=True)
    unit.add_argument("--privacy-unit", metavar="COLUMN", help="the column identifying a privacy unit")
    unit.add_argument("--row-privacy", action="store_true", help="each row is its own privacy unit")
    p.add_argument("--max-rows", type=_bound, default=None, metavar="N|auto",
                   help="rows kept per unit (default 1: one random row per unit; explain says so), or auto: "
                        "each query chooses it privately from a share of its budget (docs/bounds.md)")
    p.add_argument("--max-groups", type=_bound, default=None, metavar="N|auto",
                   help="groups kept per unit (default max-rows), or auto")
    p.add_argument("--total-epsilon", type=float, help="total ε of a new ledger / one-shot session")
    p.add_argument("--total-delta", type=float, default=None, help="total δ (default: the query's δ)")
    p.add_argument("--total-rho", type=float, help="total zCDP ρ of a new ledger")
    p.add_argument("--ledger", metavar="PATH", help="budget ledger file kept across runs")
    p.add_argument("--keys", action="append", default=[], metavar="TABLE.COLUMN=V1,V2,...",
                   help="public GROUP BY keys of a column (or =@file with one key per line)")
    p.add_argument("--bounds", action="append", default=[], metavar="TABLE.COLUMN=LOW:HIGH",
                   help="clipping bounds of a column (used without CLAMP in the query)")
    p.add_argument("--backend", default="duckdb", help="execution backend (default duckdb)")
    p.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)


def _ci(text: str) -> float:
    """``--ci``: a confidence level, checked as ``collect(..., ci=...)`` checks it (its fix spelled as the flag).

    Example:
        >>> _ci("0.95")
        0.95
        >>> _ci("95")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a confidence level strictly between 0 and 1, ... Fix: give e.g. --ci 0.95

    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a confidence level such as 0.95, got {text!r}. "
                                         "Fix: give e.g. --ci 0.95") from None
    try:
        return confidence(value)
    except dp.DPFrameError as e:
        raise argparse.ArgumentTypeError(for_command_line(f"{e.message}. Fix: {e.fix}")) from None


def _bound(text: str) -> int | str:
    """``--max-rows`` / ``--max-groups``: a whole number, or ``auto``; the privacy unit checks the number's range.

    ``auto`` is chosen privately per query, as under ``dp.PrivacyUnit(column, max_rows="auto")``.

    Example:
        >>> _bound("10"), _bound("auto")
        (10, 'auto')

    """
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") from None


def ledger_meta(path: str) -> tuple[Budget, str] | None:
    """The total budget and accountant a ledger file was created with (None if it does not exist)."""
    if not Path(path).exists():
        return None
    try:
        con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        finally:
            con.close()
        return decode(meta["total"]), str(meta["accountant"])
    except (sqlite3.Error, KeyError, ValueError, json.JSONDecodeError) as e:
        raise CLIError(f"{path} is not a dpframe ledger ({e})") from None


def _budget(epsilon: float | None, delta: float | None, rho: float | None, what: str) -> Budget | None:
    if rho is not None:
        if epsilon is not None:
            raise CLIError(f"give {what} ε or ρ, not both")
        return dp.ZCDP(rho, delta=delta or 0.0) if delta else dp.ZCDP(rho)
    if epsilon is None:
        return None
    return dp.ApproxDP(epsilon, delta) if delta else dp.PureDP(epsilon)


def _keys(specs: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for spec in specs:
        name, value = _pair(spec, "--keys")
        if value.startswith("@"):
            try:
                lines = Path(value[1:]).read_text().splitlines()
            except (OSError, UnicodeDecodeError) as e:
                raise CLIError(f"--keys cannot read the key file {value[1:]!r} ({getattr(e, 'strerror', None) or e}); "
                               "give one key per line in a UTF-8 text file") from None
            out[name] = [v.strip() for v in lines if v.strip()]
        else:
            out[name] = [v.strip() for v in value.split(",")]
    return out


def _bounds(specs: list[str]) -> dict[str, tuple[float, float]]:
    out = {}
    for spec in specs:
        name, value = _pair(spec, "--bounds")
        parts = value.replace(",", ":").split(":")
        try:
            lo, hi = (float(p) for p in parts)
        except ValueError:
            raise CLIError(f"--bounds must look like TABLE.COLUMN=LOW:HIGH, got {spec!r}") from None
        out[name] = (lo, hi)
    return out


def session(args: argparse.Namespace, *, spend: bool) -> tuple[dp.Session, Budget]:
    """The session and the query budget described by the command-line arguments."""
    query_budget = _budget(args.epsilon, args.delta, args.rho, "the query's")
    if query_budget is None:
        raise CLIError("give the query's budget: --epsilon E [--delta D] or --rho R")
    return _opened(args, spend, query_budget), query_budget


def _opened(args: argparse.Namespace, spend: bool, query_budget: Budget | None) -> dp.Session:
    """The session of the arguments; its total is the ledger's, ``--total-*``, or else ``query_budget``."""
    delta = getattr(args, "delta", 0.0)
    total = _budget(args.total_epsilon, args.total_delta if args.total_delta is not None else delta,
                    args.total_rho, "the total")
    accountant = None
    ledger = args.ledger
    if ledger is not None:
        meta = ledger_meta(ledger)
        if meta is not None:
            total = total or meta[0]
            accountant = meta[1]
        elif not spend:
            ledger = None
        elif total is None:
            raise CLIError(f"the ledger {ledger} does not exist yet: give its total budget with --total-epsilon "
                           "(and --total-delta) or --total-rho")
    if total is None:
        total = query_budget
    if total is None:
        raise CLIError("give the total budget: --total-epsilon E [--total-delta D] or --total-rho R, or --ledger")
    unit = dp.PrivacyUnit.row() if args.row_privacy else \
        dp.PrivacyUnit(args.privacy_unit, max_rows=args.max_rows, max_groups=args.max_groups)
    tables = dict(_pair(t, "--table") for t in args.table)
    public = dict(_pair(t, "--public-table") for t in args.public_table)
    return dp.Session(tables, privacy_unit=unit, budget=total, ledger=ledger, backend=args.backend,
                      accountant=accountant, seed=args.seed, public_tables=public or None,
                      public_keys=_keys(args.keys) or None, bounds=_bounds(args.bounds) or None)


def serve(args: argparse.Namespace) -> None:
    """``dpframe serve``: the session, served on ``--address`` until interrupted (Ctrl-C or SIGTERM)."""
    try:
        key = Path(args.authkey_file).read_text(encoding="utf-8").strip().encode()
    except UnicodeDecodeError:      # its message would quote a byte of the key (and where) in the owner's logs
        raise CLIError(f"--authkey-file {args.authkey_file}: the authkey file is not UTF-8 text (e.g. the "
                       "output of secrets.token_hex(32))") from None
    except OSError as e:
        raise CLIError(f"--authkey-file {args.authkey_file}: cannot read it ({e.strerror or type(e).__name__}); pass "
                       "a file holding the key (e.g. the output of secrets.token_hex(32), chmod 600)") from None
    mode = stat.S_IMODE(os.stat(args.authkey_file).st_mode)
    if os.name == "posix" and mode & 0o077:     # whoever reads the key connects as an analyst (as ssh refuses)
        raise CLIError(f"--authkey-file {args.authkey_file}: other users can read or change the key (mode "
                       f"{mode:04o}); make it its owner's alone: chmod 600 {args.authkey_file}")
    host, sep, port = args.address.rpartition(":")
    address: tuple[str, int] | str = args.address
    if sep and port.isdigit() and "/" not in args.address:
        address = (host.strip("[]"), int(port))
        if not address[0]:          # Python's "" host is every interface, not this machine alone
            raise CLIError(f"--address {args.address}: give the host, e.g. 127.0.0.1:{port} (or 0.0.0.0:{port} "
                           "to listen on every interface)")
    tls = None
    if args.tls_cert is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(args.tls_cert, args.tls_key)
        except OSError as e:        # ssl.SSLError too: "[SSL] PEM lib (_ssl.c:3905)" names neither flag nor file
            reason = (e.reason or "not a PEM certificate and key") if isinstance(e, ssl.SSLError) else \
                e.strerror or type(e).__name__
            keyed = "" if args.tls_key is None else f" with --tls-key {args.tls_key}"
            raise CLIError(f"--tls-cert {args.tls_cert}{keyed}: cannot load the certificate and its key ({reason}); "
                           "pass the server's certificate chain as a PEM file, and its private key in it or in "
                           "--tls-key") from None
    elif args.tls_key is not None:
        raise CLIError("--tls-key needs --tls-cert")
    sess = _opened(args, True, None)
    try:
        idle = None if args.idle_timeout == 0 else args.idle_timeout
        server = dp.Server(sess, address, authkey=key, tls=tls, idle_timeout=idle,
                           pad=None if args.pad == 0 else args.pad,
                           stream_idle=None if args.stream_idle == 0 else args.stream_idle)
        print(f"dpframe: serving {', '.join(sess.tables())} on {server.address}; stop with Ctrl-C", flush=True)
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            server.close()
    finally:
        sess.close()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _emit(df: pl.DataFrame, fmt: str, file: Any = None) -> None:
    file = sys.stdout if file is None else file
    if fmt == "csv":
        file.write(df.write_csv())
    elif fmt == "json":
        print(json.dumps(df.to_dicts(), default=str), file=file)
    else:
        print(df, file=file)


def query(args: argparse.Namespace) -> None:
    """``dpframe query``: charge, run, print the released result."""
    sess, budget = session(args, spend=True)
    try:
        q = sess.sql(args.sql)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", dp.TopKWarning)
            warnings.simplefilter("always", dp.NoIntervalWarning)
            collect: Any = q.collect       # collect(budget, ci=None, diagnostics=False) is plain collect(budget)
            result = collect(budget, ci=args.ci, diagnostics=bool(args.diagnostics))
        diagnostics = None
        if isinstance(result, Diagnosed):
            result, diagnostics = result
        for w in caught:      # a short TOP_K, a measure without an interval: one line on stderr, like the errors
            if issubclass(w.category, dp.TopKWarning | dp.NoIntervalWarning):
                print(f"dpframe: note: {for_command_line(_line(w.message))}", file=sys.stderr)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        explain_only = getattr(q, "explain_only", False)
        if explain_only:
            print(for_command_line(str(result["explain"][0])))
            return
        _emit(result, args.format)
        if diagnostics is not None:     # machine formats keep stdout one document: the diagnostics go to stderr
            side = sys.stderr if args.format != "table" else sys.stdout
            print(f"{'dpframe: ' if args.format != 'table' else ''}diagnostics (1/10 of this query's budget):",
                  file=side)
            _emit(diagnostics, args.format, side)
        summary = (f"spent {describe(sess.spent())} of {describe(sess.accountant.total)}; "
                   f"remaining {describe(sess.remaining())}")
        if not sess.rng.private:
            summary += " [seeded random source: NOT PRIVATE]"
        print(summary, file=sys.stderr if args.format != "table" else sys.stdout)
    finally:
        sess.close()


def explain(args: argparse.Namespace) -> None:
    """``dpframe explain``: the plan, cost and accuracy; spends nothing."""
    sess, budget = session(args, spend=False)
    try:
        text = sess.sql(args.sql).explain(budget, format="json" if args.format == "json" else "text")
        print(json.dumps(text, default=str, indent=2) if args.format == "json" else for_command_line(str(text)))
    finally:
        sess.close()


def budget(args: argparse.Namespace) -> None:
    """``dpframe budget``: a ledger's total, spent and remaining budget."""
    meta = ledger_meta(args.ledger)
    if meta is None:
        raise CLIError(f"no ledger at {args.ledger}")
    total, name = meta
    accountant = plugin_host().accountant(name)(total)
    ledger = Ledger(args.ledger, accountant)
    try:
        spent = ledger.spent()
        charges = ledger.charges()
        recorded = ledger.meta()
    finally:
        ledger.close()
    row = {"ledger": str(args.ledger), "accountant": name, "total": describe(total),
           "spent": describe(accountant.report(spent)),
           "remaining": describe(accountant.remaining(spent)), "queries": len(charges),
           **{shown: describe_meta(key, recorded[key]) if key in recorded else "(not recorded yet)"
              for key, shown in (("privacy_unit", "unit"), ("tables", "tables"))}}
    if args.format == "json":
        print(json.dumps(row))
    else:
        width = max(len(k) for k in row)
        print("\n".join(f"{k:<{width}}  {v}" for k, v in row.items()))


DECLARED_BOUNDS = re.compile(r"dp\.Session\(\.\.\., bounds=\{'([^']+)': \(lower, upper\)\}\)")
"""A fix declaring a column's bounds on the session; ``--bounds TABLE.COLUMN=LOW:HIGH`` here."""
UNIT_BOUND = re.compile(r"dp\.PrivacyUnit\('[^']*', max_rows=N\)")
"""A fix giving the privacy unit its ``max_rows``; ``--max-rows N`` here."""
SPELLINGS = (
    (PIN_FIX.format(argument="max_rows"), "--max-rows N"),      # the command line has no frame.bound()
    (PIN_FIX.format(argument="max_groups"), "--max-groups N"),
    ("dp.Session(..., public_keys={'table.column': [...]}) or sess.sql(..., keys={...})",
     "--keys TABLE.COLUMN=V1,V2,..."),
    ("dp.Session(public_keys={'table.column': [...]}) or sess.sql(..., keys={...})", "--keys TABLE.COLUMN=V1,V2,..."),
    ("dp.ApproxDP(epsilon, delta=1e-7)", "--delta 1e-7"),
    ("dp.ZCDP(rho, delta=1e-7)", "--delta 1e-7"),
    ("dp.PrivacyUnit(column, max_rows=<a number>)", "--max-rows N"),
    ("dp.PrivacyUnit(column, max_groups=<a number>)", "--max-groups N"),
    ("give this query's budget as dp.PureDP(epsilon) or dp.ZCDP(rho)",
     "give this query --epsilon E without --delta, or --rho R"),
    ("give this query's budget as dp.PureDP(epsilon)", "give this query --epsilon E without --delta"),
    ("give this query a dp.PureDP(epsilon) budget", "give this query --epsilon E (not --rho)"),
    ("give this query an (ε, δ) budget such as dp.ApproxDP(1, 1e-7) or dp.PureDP(1)",
     "give this query --epsilon E [--delta D] (not --rho)"),
    ("open the session with a dp.ZCDP budget", "use a ledger made with --total-rho"),
    ("pass e.g. ci=0.95", "give e.g. --ci 0.95"),
    ("leave ci= out", "leave --ci out"),
    ("drop diagnostics=True", "leave --diagnostics out"),
    ("ci= adds no interval columns", "--ci adds no interval columns"),
    ("collect(..., ci=0.95)", "--ci 0.95"),
    ("collect(..., diagnostics=True)", "--diagnostics"),
)
"""Fixes the library's errors spell in Python, and the flags that say the same on the command line (in order:
a longer fix before the shorter one it starts with)."""
FLAGS = MappingProxyType({"ci": "--ci", "diagnostics": "--diagnostics"})
"""Arguments of ``collect`` that are flags of ``dpframe query``: an error naming one names the flag."""


def for_command_line(text: str) -> str:
    """``text`` with the fixes it spells in Python (:data:`SPELLINGS`) spelled as this command's flags.

    Example:
        >>> for_command_line("Fix: write SUM(CLAMP(x, lower, upper)), or declare them: "
        ...                  "dp.Session(..., bounds={'t.x': (lower, upper)})")
        'Fix: write SUM(CLAMP(x, lower, upper)), or declare them: --bounds t.x=LOWER:UPPER'

    """
    text = UNIT_BOUND.sub("--max-rows N", DECLARED_BOUNDS.sub(r"--bounds \1=LOWER:UPPER", text))
    for python, flags in SPELLINGS:
        text = text.replace(python, flags)
    return text


def run(args: argparse.Namespace) -> int:
    """Dispatch one of :data:`COMMANDS`; return the exit code."""
    try:
        {"query": query, "explain": explain, "budget": budget, "serve": serve}[args.command](args)
    except dp.BudgetExceededError as e:
        print(f"dpframe: error: {_line(e)}", file=sys.stderr)
        return EXIT_BUDGET
    except dp.DPFrameError as e:
        text = for_command_line(_line(e))
        flag = FLAGS.get(str(e.argument))
        if flag is not None and text.startswith(f"{e.argument}: "):
            text = flag + text[len(str(e.argument)):]
        one_shot = getattr(args, "ledger", None) is None and getattr(args, "total_epsilon", None) is None \
            and getattr(args, "total_rho", None) is None
        if one_shot and "total budget has δ = 0" in text:     # its total is this query's budget: --delta gives both
            text += "; or give the query a δ, --delta D: without --ledger or --total-*, the total is the query's budget"
        print(f"dpframe: error: {text}", file=sys.stderr)
        return EXIT_INPUT
    except (CLIError, OSError) as e:
        print(f"dpframe: error: {_line(e)}", file=sys.stderr)
        return EXIT_INPUT
    except Exception as e:  # an engine error dpframe did not anticipate: still one line, never a traceback
        print(f"dpframe: error: {type(e).__name__}: {_line(e, 300)}", file=sys.stderr)
        return EXIT_INPUT
    return 0


def _line(e: object, limit: int | None = None) -> str:
    text = " ".join(str(e).split())
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"
