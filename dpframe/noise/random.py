"""Random sources: where every random bit the engine uses comes from.

Private releases draw from :class:`SystemRandomSource`, which reads the operating system's CSPRNG
(``os.urandom``) and turns the bytes into numpy arrays with ``np.frombuffer``. :class:`SeededRandomSource`
wraps numpy's PCG64 and exists **for tests only**: it is deterministic, predictable and says so
(``private = False``). Nothing here uses numpy's global random state or floating-point randomness.

Every derived draw is exact: :meth:`uniform_below` rejects 64-bit (or narrower) words that would cause
modulo bias, and :meth:`permutation` sorts by random 64-bit keys and redraws all keys on any tie.

Example:
    >>> src = default_source(seed=7)          # seeded: tests only
    >>> src.private
    False
    >>> sorted(src.permutation(4).tolist())
    [0, 1, 2, 3]
    >>> default_source().private             # the OS CSPRNG
    True

"""

from __future__ import annotations

import operator
import os
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpframe.errors import ArgumentError, ArgumentTypeError
from dpframe.sealed import Sealed

__all__ = ["RandomSource", "SeededRandomSource", "SystemRandomSource", "default_source"]

_TWO_63 = 2**63
_TWO_64 = 2**64


@runtime_checkable
class RandomSource(Protocol):
    """What the samplers and the query engine need from a source of randomness.

    ``private`` is True only for a source fit for differentially private releases (the OS CSPRNG).
    """

    private: bool

    def random_uint64(self, size: int) -> npt.NDArray[np.uint64]:
        """``size`` independent uniform 64-bit words (dtype uint64)."""
        ...

    def uniform_below(self, bound: int, size: int) -> npt.NDArray[Any]:
        """``size`` exact uniform integers in ``[0, bound)``, ``bound >= 1``.

        dtype int64 when ``bound <= 2**63``, else an object array of Python ints.
        """
        ...

    def permutation(self, n: int) -> npt.NDArray[np.int64]:
        """A uniformly random permutation of ``range(n)`` (int64)."""
        ...

    def seed_for_engine(self) -> int:
        """A fresh uniformly random integer in ``[0, 2**63)``."""
        ...


def as_int(value: object, name: str, fix: str) -> int:
    """``value`` as an int (``operator.index``), or an :class:`~dpframe.errors.ArgumentTypeError` naming ``name``.

    A bool is refused (``True`` is no count); numpy integers are taken.

    Example:
        >>> as_int(np.int8(3), "size", "pass a count")
        3
        >>> as_int(2.0, "size", "pass a count")
        Traceback (most recent call last):
        ...
        dpframe.errors.ArgumentTypeError: size: must be an int, got float. Fix: pass a count

    """
    if isinstance(value, bool):
        raise ArgumentTypeError("must be an int, got a bool", argument=name, fix=fix)
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ArgumentTypeError(f"must be an int, got {type(value).__name__}", argument=name, fix=fix) from None


def check_size(size: object, name: str = "size") -> int:
    """``size`` as a non-negative int, or a dpframe error (a ValueError or TypeError) naming ``name`` and the fix."""
    fix = "pass a non-negative integer count"
    value = as_int(size, name, fix)
    if value < 0:
        raise ArgumentError(f"must be >= 0, got {value}", argument=name, fix=fix)
    return value


def _check_bound(bound: object) -> int:
    fix = "pass an integer >= 1 (draws are in [0, bound))"
    value = as_int(bound, "bound", fix)
    if value < 1:
        raise ArgumentError(f"must be >= 1, got {value}", argument="bound", fix=fix)
    return value


class _WordSource:
    """Everything derived exactly from a stream of uniform 64-bit words (``random_uint64``)."""

    private: bool = False

    def random_uint64(self, size: int) -> npt.NDArray[np.uint64]:
        raise NotImplementedError

    def _chunks(self, size: int, width: int) -> npt.NDArray[Any]:
        """``size`` uniform unsigned ints of ``width`` bits (16, 32 or 64), cut from 64-bit words."""
        per_word = 64 // width
        words = self.random_uint64(-(-size // per_word))
        dtype = {16: np.uint16, 32: np.uint32, 64: np.uint64}[width]
        return words.view(dtype)[:size]

    def _below_native(self, bound: int, size: int) -> npt.NDArray[np.unsignedinteger[Any]]:
        """Exact uniform draws in [0, bound) for 1 <= bound <= 2**64, as unsigned ints (16-64 bits)."""
        if bound == 1 or size == 0:
            return np.zeros(size, dtype=np.uint64)
        width = 16 if bound <= 2**8 else 32 if bound <= 2**24 else 64
        draws: npt.NDArray[np.unsignedinteger[Any]] = self._chunks(size, width)
        if bound & (bound - 1) == 0:  # power of two: keep the low bits, no rejection needed
            return draws & draws.dtype.type(bound - 1)
        # Words below 2**width mod bound are rejected; the remaining range [thr, 2**width) has a
        # length divisible by bound, so the residue mod bound of an accepted word is exactly uniform.
        thr = (2**width) % bound
        draws = draws.copy()
        bad = np.flatnonzero(draws < thr)
        while bad.size:
            fresh = self._chunks(bad.size, width)
            draws[bad] = fresh
            bad = bad[fresh < thr]
        return draws % draws.dtype.type(bound)

    def _below_wide(self, bound: int, size: int) -> npt.NDArray[np.object_]:
        """Exact uniform draws in [0, bound) for any bound, as Python ints (object array)."""
        nbits = bound.bit_length()
        nwords = -(-nbits // 64)
        out = np.empty(size, dtype=object)
        pending = np.arange(size)
        while pending.size:
            words = self.random_uint64(pending.size * nwords).reshape(pending.size, nwords)
            value = words[:, 0].astype(object)
            for i in range(1, nwords):
                value = value + (words[:, i].astype(object) << (64 * i))
            value = value >> (64 * nwords - nbits)  # uniform on [0, 2**nbits); accept below bound
            ok = np.asarray(value < bound, dtype=bool)
            out[pending[ok]] = value[ok]
            pending = pending[~ok]
        return out

    def uniform_below(self, bound: int, size: int) -> npt.NDArray[Any]:
        """``size`` exact uniform integers in ``[0, bound)`` (int64 if ``bound <= 2**63``, else object).

        Example:
            >>> SeededRandomSource(1).uniform_below(10, 5).dtype
            dtype('int64')

        """
        bound = _check_bound(bound)
        size = check_size(size)
        if bound <= _TWO_63:
            return self._below_native(bound, size).astype(np.int64)
        if bound <= _TWO_64:
            return self._below_native(bound, size).astype(object)
        return self._below_wide(bound, size)

    def permutation(self, n: int) -> npt.NDArray[np.int64]:
        """A uniformly random permutation of ``range(n)``.

        Sorts ``range(n)`` by independent uniform 64-bit keys; if any two keys tie, all keys are
        redrawn, so the result is exactly uniform (by exchangeability of distinct iid keys).

        Example:
            >>> sorted(SeededRandomSource(3).permutation(5).tolist())
            [0, 1, 2, 3, 4]

        """
        n = check_size(n, "n")
        while True:
            keys = self.random_uint64(n)
            order = np.argsort(keys, kind="stable")
            ranked = keys[order]
            if n < 2 or not bool(np.any(ranked[1:] == ranked[:-1])):
                return order.astype(np.int64)

    def seed_for_engine(self) -> int:
        """A fresh uniformly random integer in ``[0, 2**63)``.

        Example:
            >>> 0 <= SeededRandomSource(0).seed_for_engine() < 2**63
            True

        """
        return int(self.random_uint64(1)[0]) >> 1


class SystemRandomSource(_WordSource, Sealed):
    """The private source: every bit comes from the OS CSPRNG (``os.urandom``).

    Sealed: a session hands its source out (``sess.rng``), and a method replaced on it would draw the noise.

    Example:
        >>> src = SystemRandomSource()
        >>> src.private, src.random_uint64(3).dtype
        (True, dtype('uint64'))

    """

    private: bool = True

    def random_uint64(self, size: int) -> npt.NDArray[np.uint64]:
        """``size`` uniform 64-bit words read from ``os.urandom`` (a fresh, writable array)."""
        size = check_size(size)
        return np.frombuffer(bytearray(os.urandom(8 * size)), dtype=np.uint64)

    def __repr__(self) -> str:
        return "SystemRandomSource()"


class SeededRandomSource(_WordSource):
    """A deterministic source (numpy ``PCG64(seed)``) for tests only, not private.

    Its output is predictable from the seed, so it must never drive a release whose privacy matters;
    ``private`` is False so the engine can refuse it.

    Example:
        >>> a = SeededRandomSource(42).random_uint64(4)
        >>> b = SeededRandomSource(42).random_uint64(4)
        >>> bool((a == b).all()), SeededRandomSource(42).private
        (True, False)

    """

    private: bool = False

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ArgumentTypeError(f"must be an int, got {type(seed).__name__}", argument="seed",
                                    fix="pass a non-negative integer")
        if seed < 0:
            raise ArgumentError(f"must be >= 0, got {seed}", argument="seed", fix="pass a non-negative integer")
        self.seed = int(seed)
        self._bitgen = np.random.PCG64(self.seed)

    def random_uint64(self, size: int) -> npt.NDArray[np.uint64]:
        """``size`` raw 64-bit outputs of PCG64."""
        size = check_size(size)
        out: npt.NDArray[np.uint64] = self._bitgen.random_raw(size)
        return out

    def __repr__(self) -> str:
        return f"SeededRandomSource({self.seed})"


def default_source(seed: int | None = None) -> RandomSource:
    """The OS CSPRNG source when ``seed`` is None, else a seeded, non-private source for tests.

    Example:
        >>> type(default_source()).__name__, type(default_source(1)).__name__
        ('SystemRandomSource', 'SeededRandomSource')

    """
    if seed is None:
        return SystemRandomSource()
    return SeededRandomSource(seed)
