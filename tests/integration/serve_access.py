"""A TestClient for tests of ``longtask serve`` that are not about who may do what.

Since issue 41 every request to a server with tokens needs one, and a token's holder sees
only the threads they own. Tests of other things (answers, streams, the gate, webhooks)
make every configured name an admin and send a token of the first name's as ``X-Api-Key`` with every
request that gives no ``Authorization`` of its own (a request's own header wins: the
bearer token is read first). Who may see and do what is tested in ``test_access.py``.
"""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

ADMIN_KEY = "serve-access-admin-key"


class AdminClient(TestClient):
    def __init__(self, app: Any, **kw: Any) -> None:
        access = app.state.access
        names = access.tokens.names()
        access.roles.update({name: "admin" for name in names})
        headers = dict(kw.pop("headers", None) or {})
        if names:
            # Only tokens' hashes are kept: a token of the first name's, for this client.
            access.tokens.add(ADMIN_KEY, names[0])
            headers.setdefault("X-Api-Key", ADMIN_KEY)
        super().__init__(app, headers=headers, **kw)
