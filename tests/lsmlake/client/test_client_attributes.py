"""The Client's deadline and warehouse are attributes a caller may set, as they were before the Client was
composed of parts: the new value reaches every part, the catalog's client included."""

from __future__ import annotations

from lsmlake.client.client import Client


def test_the_deadline_and_the_warehouse_stay_settable() -> None:
    with Client("127.0.0.1:1", timeout_s=5) as c:  # no call is made: nothing listens there
        c.timeout_s = 2.5
        c.warehouse = "/tmp/elsewhere"
        assert c.timeout_s == 2.5 and c._conn.catalog_client.timeout_s == 2.5
        assert c.warehouse == "/tmp/elsewhere" and c._conn.warehouse == "/tmp/elsewhere"
