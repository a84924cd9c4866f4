"""A table read from a file is the file as it was when the session was created.

Backends read a file-backed table again for every query (Polars scans it, DuckDB's view and Spark read
it), some of them more than once per query (contribution bounding's hashes, then the statistics through
the kept-row mask; rank windows' sample; a quantile's completion), and the DuckDB backend keeps work per
table between queries (which units have more rows than ``max_rows``). All of that is sound only while the
file stays as it was: a kept-row mask or a cache computed on one version and applied to another can let a
unit contribute far more than ``max_rows`` rows, so a release would no longer be covered by its cost.

So the catalog records each file's :class:`FileVersion` when the session is created, and a table whose
file changed is never read again. The check is per table: a query is checked on the tables it reads
(its plan's scan, :func:`~dpframe.plan.nodes.tables_read`; every step's for a multi-step release), and
queries on the other tables keep running:

* a query that starts after the change to a file it reads is refused
  (:class:`~dpframe.errors.TableChangedError`, naming the table and the file) before anything is charged
  (the refusal depends on the file having been written, not on its rows);
* a change while a query reads the table is found when its statistics come back (each read checks the
  file it read): the query fails, its cost stays charged (the rows were read), and nothing is released;
* a release that cannot name its tables when it is charged checks every table's file: an interactive
  stream (sparse vector, target charging) and the individual filter, which reserve before they are
  given their queries, and :func:`~dpframe.interactive.odp.run_ex_post` called without ``tables=``.

A new session reads the new version (with the same ``ledger=`` file, the budget spent so far carries over).

What a version is: the file's device, inode, size, and modification and status-change times in
nanoseconds — the kernel sets the status-change time on every write (also on a change of permissions or
links, which is refused too, to be safe) and no call can set it back — and a digest of the file's last
bytes (a Parquet file's whole footer: its row groups, their sizes and statistics), which also tells apart
two same-size versions written within one tick of a coarse file-system clock. A directory (Spark: a
Parquet directory or a Delta table) is the version of every file under it, without digests (a directory
may hold thousands of files: a ``stat`` each), also under a linked subdirectory, whose files Polars reads
(each real directory walked once; ``tests/adversarial/test_review40a.py``).
Paths on a remote file system (``s3a://``, ``hdfs://``) are not checked: keep them unchanged while a
session is open. Nor is a ``LazyFrame`` a data owner passes (its plan runs again for every query): it must
give the same rows every time.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("u,x" + os.linesep + "1,2" + os.linesep)
    >>> before = file_version(path)
    >>> before == file_version(path)
    True
    >>> with open(path, "a") as f:
    ...     _ = f.write("2,3" + os.linesep)
    >>> before == file_version(path)
    False

"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

TAIL = 1 << 16
"""Bytes at the end of a file (other than Parquet) whose digest is part of its version."""
FOOTER_LIMIT = 1 << 26
"""A Parquet footer longer than this (64 MiB: not a real one) counts as the last :data:`TAIL` bytes."""


@dataclass(frozen=True)
class FileVersion:
    """One version of a file or directory: equal versions mean nothing was written in between.

    ``entries`` holds, per file (every file under a directory, by relative path; ``""`` for a file given
    itself), ``(path, device, inode, size, modified_ns, changed_ns, digest)`` (``digest`` empty under a
    directory); a missing path has none.
    """

    path: str
    entries: tuple[tuple[str, int, int, int, int, int, bytes], ...]


def file_version(source: object) -> FileVersion | None:
    """The current version of ``source`` if it is a local file or directory path; ``None`` otherwise.

    A path that does not exist (or no longer does) has a version with no entries. A ``file:`` URI is
    its local path (:func:`local_path`); other URIs (``s3a://``, ``hdfs://`` ...) are not checked.

    Example:
        >>> file_version("s3a://bucket/visits.parquet") is None, file_version(42) is None
        (True, True)
        >>> file_version("/no/such/file.parquet").entries, file_version("file:///no/such/file.parquet").entries
        ((), ())

    """
    root = local_path(source)
    if root is None:
        return None
    if not _is_dir(root):
        entry = _entry(root, "")
        return FileVersion(str(root), () if entry is None else (entry,))
    entries, seen = [], set()
    for folder, dirs, files in os.walk(root, followlinks=True):    # Polars reads the files under a linked folder
        real = os.path.realpath(folder)
        if real in seen:           # a cycle of links (Polars refuses to read it), or a folder linked twice: once
            dirs.clear()
            continue
        seen.add(real)
        dirs.sort()
        for name in sorted(files):
            entry = _entry(Path(folder) / name, os.path.relpath(Path(folder) / name, root), digest=False)
            if entry is not None:
                entries.append(entry)
    return FileVersion(str(root), tuple(entries))


def local_path(source: object) -> Path | None:
    """The local file or directory ``source`` names: a path, or a ``file:`` URI of an absolute path; None otherwise.

    Hadoop (Spark's reader) reads ``file:///p``, ``file:/p`` and ``FILE:///p`` as the local path ``/p``, its text
    as it is (no %-decoding); a URI with a host (``file://host/p``) or of another scheme is not a local path. Every
    check a local path gets (its version here; on Spark, a pattern or a reading other than Polars' read through
    Polars) is made on this path: a ``file:`` URI once skipped them all (``tests/adversarial/test_review40a.py``).

    Example:
        >>> local_path("file:///data/t.parquet"), local_path("FILE:/data/t.parquet"), local_path("t.parquet")
        (PosixPath('/data/t.parquet'), PosixPath('/data/t.parquet'), PosixPath('t.parquet'))
        >>> local_path("s3a://bucket/t.parquet"), local_path("file://host/t.parquet"), local_path(42)
        (None, None, None)

    """
    if isinstance(source, Path):
        return source
    if not isinstance(source, str):
        return None
    if source[:5].lower() == "file:":
        rest = source[5:]
        if rest.startswith("//"):                       # an authority: none (this machine) or a host
            host, _, path = rest[2:].partition("/")
            rest = "" if host else "/" + path
        return Path(rest) if rest.startswith("/") else None
    return None if "://" in source else Path(source)


def _is_dir(path: Path) -> bool:
    """Whether ``path`` is a folder (not for a name no file can have: too long, a lone surrogate)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _entry(path: Path, name: str, digest: bool = True) -> tuple[str, int, int, int, int, int, bytes] | None:
    """``path``'s identity, size, times and (with ``digest``) tail digest; ``None`` if it cannot be read."""
    try:
        if not digest:
            info = path.stat()
            return name, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, b""
        with path.open("rb") as f:
            info = os.fstat(f.fileno())
            tail = _tail_digest(f, info.st_size, path.suffix.lower() == ".parquet")
    except (OSError, ValueError):     # (and a name no file can have: a lone surrogate, a NUL byte)
        return None
    return name, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, tail


def _tail_digest(f: BinaryIO, size: int, parquet: bool) -> bytes:
    """A digest of a file's footer (Parquet: ``length`` + ``PAR1`` at the end) or of its last :data:`TAIL` bytes."""
    start = max(0, size - TAIL)
    if parquet and size >= 12:
        f.seek(size - 8)
        end = f.read(8)
        footer = int.from_bytes(end[:4], "little")
        if end[4:] == b"PAR1" and footer + 8 <= size and footer <= FOOTER_LIMIT:
            start = size - 8 - footer
    f.seek(start)
    return hashlib.blake2b(f.read(size - start), digest_size=16).digest()


__all__ = ["FileVersion", "file_version", "local_path"]
