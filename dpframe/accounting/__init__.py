"""Privacy accounting: accountants (how costs compose) and the ledger (where charges are kept).

An accountant is a pure rule: it converts a query's cost into the session's notion, composes charges
and says whether a total fits. The :class:`Ledger` stores every charge durably and does the
check-and-charge atomically (one SQLite transaction, so threads and processes sharing a ledger file
can never overspend).
"""

from dpframe.accounting.accountants import Accountant, BasicAccountant, ZCDPAccountant
from dpframe.accounting.ledger import Charge, Ledger

__all__ = ["Accountant", "BasicAccountant", "Charge", "Ledger", "ZCDPAccountant"]
