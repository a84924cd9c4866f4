"""The mathematics of privacy accounting, as leaf modules.

Each module here is plain numerics over numpy arrays and Python callables: RDP closed forms and the RDP →
(ε, δ) conversions (:mod:`.rdp`), hockey-stick profiles (:mod:`.profiles`), Poisson subsampling
(:mod:`.subsampling`), binary-output mechanisms and envelopes of lines (:mod:`.binary`, :mod:`.envelope`),
the Gaussian sparse vector's moments (:mod:`.svt`) and privacy-loss distributions (:mod:`.pld`). They
import nothing from dpframe except :mod:`dpframe.accounting.checks`, :mod:`dpframe.errors` and each other,
and know nothing of curves, accountants or ledgers (``tests/accounting/test_layers.py`` checks it).

Example:
    >>> from dpframe.accounting.numerics.subsampling import amplified_epsilon
    >>> round(amplified_epsilon(1.0, 0.01), 6)
    0.017037

"""
