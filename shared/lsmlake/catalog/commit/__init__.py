"""The catalog's commits: the request and its checks, who may commit what, and the commit under the table's lock.

`request` (the shape of a commit), `checks` (its file changes against the table), `identity` (the caller's
rights and commit-user claims, the digest that makes a resend idempotent), `catalog_commits` (the commit
of file changes as one recorded snapshot) and `snapshot` (the commit of a snapshot a Paimon engine built).
"""
