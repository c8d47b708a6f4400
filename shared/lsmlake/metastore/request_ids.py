"""Client write ids: a client names each write it may resend, and the table commits each name once.

The writer service records the ids of the writes a group commit holds with the commit; the catalog
refuses a commit holding an id the table committed before and answers which ids it committed, so that
a resent write (a lost reply, a timeout, a writer restart) is answered, not written twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from lsmlake.errors import InvalidInputError

MAX_REQUEST_ID = 200
#: an id as the catalog stores it: in its principal's namespace (`<principal>/<id>`, principals <= 128 chars)
MAX_STORED_REQUEST_ID = MAX_REQUEST_ID + 129


def check_request_ids(request_ids: Sequence[str], max_chars: int = MAX_REQUEST_ID) -> list[str]:
    """Client write ids: non-empty strings of at most `max_chars` characters, none twice."""
    ids = list(request_ids)
    for rid in ids:
        if not isinstance(rid, str) or not rid or len(rid) > max_chars:
            raise InvalidInputError(f"request id {rid!r} must be a non-empty string of at most {max_chars} "
                                    "characters")
    if len(set(ids)) != len(ids):
        twice = sorted(r for r, n in Counter(ids).items() if n > 1)
        raise InvalidInputError(f"request ids {twice} appear more than once in one commit")
    return ids


def part_request_id(request_id: str | None, n: int, parts: int) -> str:
    """The request id of part `n` (from 0) of a write sent as `parts` requests: the id itself for a write
    of one part, `<request_id>/<n>` otherwise; "" for a write without an id."""
    if not request_id:
        return ""
    return request_id if parts == 1 else f"{request_id}/{n}"
