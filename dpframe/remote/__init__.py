"""Remote sessions: a data owner serves a session (:class:`Server`); analysts elsewhere :func:`connect` to it.

The boundary that in-process use cannot give (docs/guarantees.md, "Same-process code is trusted"): the
analyst's code runs in another process and reaches the data only through released results. See
``docs/remote.md``.
"""

from dpframe.remote.client import Remote, RemoteQuery, RemoteRobustMedian, connect
from dpframe.remote.frames import RemoteFrame, RemoteGroupBy
from dpframe.remote.server import Server
from dpframe.remote.tools import RemoteTool
from dpframe.remote.values import RemoteCharge

__all__ = ["Remote", "RemoteCharge", "RemoteFrame", "RemoteGroupBy", "RemoteQuery", "RemoteRobustMedian", "RemoteTool",
           "Server", "connect"]
