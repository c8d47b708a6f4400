"""The web console of the catalog service (`--ui-port`): plain server-rendered pages over the same tokens.

- `/`: the tables ranked by health (stalled first, then the worst score), with lag, runs and plans;
- `/table/{database}/{table}`: the table's figures, each bucket's LSM shape (levels and sorted runs by size),
  the compaction timeline of the last hour by state, and lag, level-0 files and plans over the last hour;
- `/login`: a form; posted with a valid token, it opens a console session (`lsmlake.auth.sessions`: reading
  only, ended by idling, its lifetime, logout or the token's removal) whose random id, never the token, is the
  cookie `lsmlake_session` (HttpOnly, SameSite=Strict, Secure under TLS) that the pages then take; `/logout`
  ends the session on the server and clears the cookie. API clients send `Authorization: Bearer <token>`
  instead. Pages need the reader role. Without a token file the console is open and needs no login.
- `/login` and `/logout` posted from another site's page are refused (login CSRF: logging a browser in as
  someone else, or out): a browser's `Sec-Fetch-Site` must say `same-origin` (or `none`: the user's own
  doing), or, from a browser that sends no `Sec-Fetch-Site`, its `Origin` must be the console's own (scheme,
  host and port, the scheme from whether TLS is on and the rest from `Host`). A request with neither header
  comes from no browser (curl, a script), and has no victim's cookies to abuse.
No script runs on any page (the policy forbids all); nothing is loaded from elsewhere; no page may be framed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from html import escape
from urllib.parse import unquote_plus, urlsplit

from catalog_svc.console_svg import HOUR_MS, line_svg, lsm_svg, timeline_svg, window_ms
from catalog_svc.health_history import HealthHistory
from lsmlake.auth.roles import Role
from lsmlake.auth.sessions import SessionStore
from lsmlake.auth.tokens import Principal
from lsmlake.catalog.filesystem import check_name
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.errors import PermissionDeniedError
from lsmlake.format.partition import partition_value_string
from lsmlake.rest.http_server import Request, Response, Route
from lsmlake.table.compact import restore_levels
from lsmlake.table.postpone import every_bucket

SESSION_COOKIE = "lsmlake_session"
# where consoles before sessions kept the token itself: cleared at every login and logout, so no browser keeps it
_TOKEN_COOKIE = "lsmlake_token"
_SAME_SITE = ("same-origin", "none")  # Sec-Fetch-Site of a form posted from the console's page, or by the user
_DEFAULT_PORTS = {"http": 80, "https": 443}
HTML = "text/html; charset=utf-8"
_STYLE = ("body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse}"
          "td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}td.l,th.l{text-align:left}"
          ".bar{display:inline-block;height:10px;background:#3a9a4a}.stalled{color:#c0392b;font-weight:bold}"
          ".buckets{display:flex;flex-wrap:wrap;gap:14px}form.logout{float:right}")
_HEADERS = (("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
            ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                                        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"))
_LOGOUT = '<form class="logout" method="post" action="/logout"><button type="submit">Log out</button></form>'


def page(title: str, body: str, status: int = 200, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    text = (f'<!doctype html><html><head><meta charset="utf-8"><title>{escape(title)} - lsmlake</title>'
            f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>")
    return Response(text, status, HTML, _HEADERS + headers)


def _redirect(to: str, *cookies: str) -> Response:
    """303 to `to` (the browser follows with a GET), setting `cookies`."""
    return Response(None, 303, HTML, _HEADERS + (("Location", to),) + tuple(("Set-Cookie", c) for c in cookies))


def error_page(status: int, message: str) -> Response:
    """A refusal as a page: 401 and 403 link to the login form."""
    hint = '<p><a href="/login">Log in with a token</a></p>' if status in (401, 403) \
        else '<p><a href="/">Tables</a></p>'
    return page(f"{status}", f"<p>{escape(message)}</p>{hint}", status)


def _login_form(status: int = 200, problem: str = "") -> Response:
    body = (f"{f'<p>{escape(problem)}</p>' if problem else ''}"
            '<form id="login" method="post" action="/login"><label>Token <input id="token" name="token" '
            'type="password" autocomplete="off"></label> <button type="submit">Open the console</button></form>')
    return page("Log in", body, status)


def _cookie(headers: Mapping[str, str], name: str) -> str | None:
    """The value of the request's cookie `name`, if it has one."""
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and value:
            return unquote_plus(value)
    return None


def _cross_site(headers: Mapping[str, str], tls: bool) -> str | None:
    """Why a request looks sent by another site's page (None: by the console's own page, the user, or no browser).

    `Sec-Fetch-Site` decides when a browser sent it (no page can forge it, and it is right behind a proxy that
    changes `Host`); otherwise `Origin` must be the console's own origin."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        return None if site.strip().lower() in _SAME_SITE else f"Sec-Fetch-Site: {site[:40]}"
    origin = headers.get("origin")
    if origin is None:
        return None
    own = _origin(f"{'https' if tls else 'http'}://{headers.get('host', '')}")
    if own is None or _origin(origin) != own:
        return f"Origin {origin[:100]} is not this console's {_show(own) if own else '(no Host header)'}"
    return None


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin, the default port filled in; None when it is none (`null`, no host)."""
    try:
        parts = urlsplit(url.strip())
        scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
    except ValueError:  # a port that is not a number
        return None
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def _show(origin: tuple[str, str, int]) -> str:
    scheme, host, port = origin
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _ms(ms: float) -> str:
    s = ms / 1000
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


class Console:
    """The routes of the console, over the catalog's operations."""

    def __init__(self, operations: CatalogOperations, history: HealthHistory,
                 clock: Callable[[], int] | None = None, tls: bool = False,
                 sessions: SessionStore | None = None) -> None:
        """`clock` (epoch ms): the operations' when None. `tls`: the console is served over TLS (its origin is
        https, the cookie is sent over TLS only). `sessions`: the logins, over the tokens the server checks;
        None when it checks none (no login needed)."""
        self.operations = operations
        self.history = history
        self.clock = clock or operations.clock
        self.tls = tls
        self.sessions = sessions
        self._cookie_flags = "; Path=/; HttpOnly; SameSite=Strict" + ("; Secure" if tls else "")

    def session_principal(self, session_id: str) -> Principal | None:
        """Who the session of a cookie acts as (reading only); None: no such session, or it ended."""
        return self.sessions.principal(session_id) if self.sessions is not None else None

    def routes(self) -> list[Route]:
        return [Route("GET", "/", Role.READER, self.tables, name="tables"),
                Route("GET", "/table/{database}/{table}", Role.READER, self.table, resource="TABLE", name="table"),
                Route("GET", "/login", Role.READER, self.login, public=True, name="login"),
                Route("POST", "/login", Role.READER, self.log_in, public=True, name="login"),
                Route("POST", "/logout", Role.READER, self.log_out, public=True, name="logout"),
                Route("GET", "/favicon.ico", Role.READER, lambda _: Response(None, 204), public=True, name="icon")]

    def tables(self, request: Request) -> Response:
        healths = self.operations.table_healths(now=self.clock())
        rows = []
        for rank, h in enumerate(healths, 1):
            db, _, name = h.table.partition(".")
            link = f'<a href="/table/{escape(db)}/{escape(name)}">{escape(h.table)}</a>'
            if h.error is not None:
                rows.append(f'<tr class="table-row"><td>{rank}</td><td class="l">{link}</td><td>0</td>'
                            f'<td class="l"><span class="stalled">UNREADABLE</span></td>'
                            f'<td class="l" colspan="5">{escape(h.error)}</td></tr>')
                continue
            state = '<span class="stalled">STALLED</span>' if h.stalled else ""
            rows.append(f'<tr class="table-row"><td>{rank}</td><td class="l">{link}</td><td>{h.score} '
                        f'<span class="bar" style="width:{h.score}px"></span></td><td class="l">{state}</td>'
                        f"<td>{_ms(h.lag_ms)}</td>"
                        f"<td>{h.max_sorted_runs} / {h.stop_trigger}</td><td>{h.level0_files}</td>"
                        f"<td>{h.pending_plans} / {h.inflight_plans}</td><td>{_ms(h.oldest_plan_age_ms)}</td></tr>")
        head = ('<tr><th>#</th><th class="l">table</th><th>score</th><th class="l"></th><th>lag</th>'
                "<th>runs / stop</th><th>level-0 files</th><th>plans requested / running</th><th>oldest plan</th>"
                "</tr>")
        body = (f"{_LOGOUT}<p>{len(healths)} tables, the least healthy first (docs/operating-tables.md).</p>"
                f'<table id="tables">{head}{"".join(rows)}</table>')
        return page("Tables", body)

    def table(self, request: Request) -> Response:
        db = check_name(request.params["database"], "database")
        tid = f"{db}.{check_name(request.params['table'], 'table')}"
        table = self.operations.get_table(tid)
        snap = table.latest_snapshot()
        splits = every_bucket(table, snap)
        h = self.operations.health_at(table, self.clock(), (snap, splits))  # figures and pictures of one snapshot
        types = table.schema.types_of(table.schema.partition_keys)
        pictures = []
        for split in sorted(splits, key=lambda s: (s.partition, s.bucket))[:64]:
            part = "/".join(f"{k}={partition_value_string(v, t)}" for k, v, t in zip(
                table.schema.partition_keys, split.partition_values, types, strict=True))
            levels = restore_levels(table, split)
            shape: dict[int, list[int]] = {}
            for run in levels.level_sorted_runs():
                shape.setdefault(run.level, []).append(run.total_size)
            title = f"{part + ' ' if part else ''}bucket {split.bucket}: {levels.number_of_sorted_runs()} runs"
            pictures.append(lsm_svg(title, sorted(shape.items()), levels.num_levels - 1))
        now = self.clock()
        samples = self.history.of(tid)
        figures = (f'<p id="figures">score {h.score}{" (STALLED: writers wait)" if h.stalled else ""}; lag '
                   f"{_ms(h.lag_ms)}; sorted runs {h.max_sorted_runs} of {h.stop_trigger}; level-0 files "
                   f"{h.level0_files}; plans requested {h.pending_plans}, running {h.inflight_plans}; snapshot "
                   f"{h.snapshot_id}; penalties: "
                   + ", ".join(f"{escape(k)} {v:.1f}" for k, v in h.penalties.items()) + "</p>")
        plans = self.operations.plans_changed_since(tid, now - HOUR_MS)
        span = window_ms(min([p.created_ms for p in plans if p.created_ms >= now - HOUR_MS]
                             + [s.time_ms for s in samples if s.time_ms >= now - HOUR_MS], default=None), now)
        charts = "".join([
            line_svg("lag", [(s.time_ms, s.lag_s) for s in samples], now, span, unit=" s"),
            line_svg("level-0 files", [(s.time_ms, float(s.level0_files)) for s in samples], now, span),
            line_svg("plans requested or running", [(s.time_ms, float(s.plans)) for s in samples], now, span)])
        minutes = f"last {span // 60_000} minutes"
        body = (f'{_LOGOUT}<p><a href="/">All tables</a></p>{figures}<h2>Buckets</h2><div class="buckets">'
                f'{"".join(pictures) or "<p>no data files</p>"}</div><h2>Compaction plans, {minutes}</h2>'
                f"{timeline_svg(plans, now, span)}<h2>Lag and backlog, {minutes}</h2>{charts}")
        return page(tid, body)

    def login(self, request: Request) -> Response:
        return _login_form()

    def log_in(self, request: Request) -> Response:
        """A session for the posted token, its id in the cookie, then the tables; an unknown token: the form again."""
        self._refuse_cross_site(request, "login")
        token = request.body.get("token", "") if isinstance(request.body, dict) else ""
        if not token or len(token) > 4096:
            return error_page(400, "send the login form with a token")
        forget_token = f"{_TOKEN_COOKIE}={self._cookie_flags}; Max-Age=0"
        if self.sessions is None:  # the console checks no tokens: it is open to everyone anyway
            return _redirect("/", forget_token)
        session_id = self.sessions.open(token)
        if session_id is None:
            return _login_form(401, "That token is not valid.")
        previous = _cookie(request.headers, SESSION_COOKIE)
        if previous is not None:  # the browser's earlier session ends: its cookie is replaced
            self.sessions.close(previous)
        return _redirect("/", forget_token, f"{SESSION_COOKIE}={session_id}{self._cookie_flags}; "
                                            f"Max-Age={int(self.sessions.lifetime_s)}")

    def log_out(self, request: Request) -> Response:
        """The session ends on the server too: a copy of the cookie stops working with the browser's."""
        self._refuse_cross_site(request, "logout")
        session_id = _cookie(request.headers, SESSION_COOKIE)
        if session_id is not None and self.sessions is not None:
            self.sessions.close(session_id)
        return _redirect("/login", f"{_TOKEN_COOKIE}={self._cookie_flags}; Max-Age=0",
                         f"{SESSION_COOKIE}={self._cookie_flags}; Max-Age=0")

    def _refuse_cross_site(self, request: Request, what: str) -> None:
        reason = _cross_site(request.headers, self.tls)
        if reason is not None:
            raise PermissionDeniedError(f"refused a {what} form posted from another site ({reason}): use the form "
                                        "on this console's own page")
