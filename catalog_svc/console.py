"""The web console of the catalog service (`--ui-port`): plain server-rendered pages over the same tokens.

- `/`: the tables ranked by health (unreadable, stalled, then the worst score), filtered by name and paged, with
  each one's size, rows, files, write rate, compaction throughput, write amplification and health figures
  (`console_tables`);
- `/table/{database}/{table}`: the table's figures, each bucket's LSM shape on a linear scale with its sizes
  written, its partitions (filtered, paged), compaction plans with their durations, the last hour's charts,
  snapshots (paged), schema and options; for admins, "compact now" and "full compaction" buttons that post a
  form with a CSRF token (`console_table`, `console_actions`);
- `/services`: every catalog, writer and compactor that reported to the status service, up or down, with its
  last heartbeat, owned buckets and running plans (`console_services`);
- pages refresh themselves every 15 s (a meta refresh: no script); `?refresh=0` stops it (`console_page`);
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
from urllib.parse import quote, unquote_plus, urlsplit

from catalog_svc import console_format as fmt
from catalog_svc.console_actions import CSRF_FIELD, Admins, request_compaction
from catalog_svc.console_figures import SnapshotDeltas, activity, plan_times
from catalog_svc.console_page import HEADERS, HTML, View, band_of, page
from catalog_svc.console_services import registry_of, services_body, statuses, warning
from catalog_svc.console_svg import HOUR_MS, line_svg, timeline_svg, window_ms
from catalog_svc.console_table import (
    options_section,
    partition_filter,
    partition_rows,
    partitions_section,
    pictures,
    plans_section,
    schema_section,
    snapshots_section,
    summary,
)
from catalog_svc.console_tables import tables_body
from catalog_svc.health_history import HealthHistory
from lsmlake.auth.roles import Role
from lsmlake.auth.sessions import SessionStore
from lsmlake.auth.tokens import Principal, TokenStore
from lsmlake.catalog.filesystem import check_name
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.errors import InvalidInputError, PermissionDeniedError
from lsmlake.rest.http_server import Request, Response, Route
from lsmlake.table.postpone import every_bucket

SESSION_COOKIE = "lsmlake_session"
# where consoles before sessions kept the token itself: cleared at every login and logout, so no browser keeps it
_TOKEN_COOKIE = "lsmlake_token"
_SAME_SITE = ("same-origin", "none")  # Sec-Fetch-Site of a form posted from the console's page, or by the user
_DEFAULT_PORTS = {"http": 80, "https": 443}
__all__ = ["HTML", "SESSION_COOKIE", "Console", "error_page", "page"]


def _redirect(to: str, *cookies: str) -> Response:
    """303 to `to` (the browser follows with a GET), setting `cookies`."""
    return Response(None, 303, HTML, HEADERS + (("Location", to),) + tuple(("Set-Cookie", c) for c in cookies))


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


class Console:
    """The routes of the console, over the catalog's operations."""

    def __init__(self, operations: CatalogOperations, history: HealthHistory,
                 clock: Callable[[], int] | None = None, tls: bool = False,
                 sessions: SessionStore | None = None, tokens: TokenStore | None = None) -> None:
        """`clock` (epoch ms): the operations' when None. `tls`: the console is served over TLS (its origin is
        https, the cookie is sent over TLS only). `sessions`: the logins, over the tokens the server checks;
        None when it checks none (no login needed). `tokens`: those tokens, to tell admins (`console_actions`)."""
        self.operations = operations
        self.history = history
        self.clock = clock or operations.clock
        self.tls = tls
        self.sessions = sessions
        self.admins = Admins(tokens)
        self.registry = registry_of(operations)
        self.deltas = SnapshotDeltas()
        self._cookie_flags = "; Path=/; HttpOnly; SameSite=Strict" + ("; Secure" if tls else "")

    def session_principal(self, session_id: str) -> Principal | None:
        """Who the session of a cookie acts as (reading only); None: no such session, or it ended."""
        return self.sessions.principal(session_id) if self.sessions is not None else None

    def routes(self) -> list[Route]:
        return [Route("GET", "/", Role.READER, self.tables, name="tables"),
                Route("GET", "/table/{database}/{table}", Role.READER, self.table, resource="TABLE", name="table"),
                # readers reach the handler, which refuses all but admins (a session's role is capped at reader)
                Route("POST", "/table/{database}/{table}/compact", Role.READER, self.compact, resource="TABLE",
                      name="compact", max_body=4096),
                Route("GET", "/services", Role.READER, self.services, name="services"),
                Route("GET", "/login", Role.READER, self.login, public=True, name="login"),
                Route("POST", "/login", Role.READER, self.log_in, public=True, name="login"),
                Route("POST", "/logout", Role.READER, self.log_out, public=True, name="logout"),
                Route("GET", "/favicon.ico", Role.READER, lambda _: Response(None, 204), public=True, name="icon")]

    def _frame(self, request: Request) -> tuple[View, str]:
        """The page's view of its address, and its navigation with the services' warning."""
        view = View.of(request.path, request.query)
        warn = warning(statuses(self.registry, self.clock()))
        return view, view.nav(logout=self.sessions is not None) + warn

    def tables(self, request: Request) -> Response:
        view, top = self._frame(request)
        now = self.clock()
        healths = self.operations.table_healths(now=now)
        return page("Tables", top + tables_body(self.operations, self.deltas, healths, view, now),
                    refresh_s=view.refresh_s)

    def services(self, request: Request) -> Response:
        view = View.of(request.path, request.query)
        now = self.clock()
        body = view.nav(logout=self.sessions is not None) + services_body(statuses(self.registry, now), now)
        return page("Services", body, refresh_s=view.refresh_s)

    def _table_id(self, request: Request) -> str:
        db = check_name(request.params["database"], "database")
        return f"{db}.{check_name(request.params['table'], 'table')}"

    def table(self, request: Request) -> Response:
        view, top = self._frame(request)
        tid = self._table_id(request)
        table = self.operations.get_table(tid)
        snap = table.latest_snapshot()
        splits = every_bucket(table, snap)
        now = self.clock()
        h = self.operations.health_at(table, now, (snap, splits))  # figures and pictures of one snapshot
        stats = self.operations.snapshot_stats(table, snap) if snap is not None else None
        plans = self.operations.plans_changed_since(tid, now - HOUR_MS)
        times = plan_times(plans, self.operations.timeline.codec, now)
        act = activity(self.deltas.recent(table, now), times, now)
        band = band_of(h.score, h.severity)
        figures = (f'<p id="figures">score {h.score}{" (STALLED: writers wait)" if h.stalled else ""}; lag '
                   f"{fmt.duration(h.lag_ms) if h.lag_ms else '0 s'}; sorted runs {h.max_sorted_runs} of "
                   f"{h.stop_trigger}; level-0 files {h.level0_files}; plans requested {h.pending_plans}, running "
                   f"{h.inflight_plans}; snapshot {h.snapshot_id}; penalties: "
                   + ", ".join(f"{escape(k)} {v:.1f}" for k, v in h.penalties.items()) + "</p>")
        reasons = "".join(f'<li class="reason" data-cause="{escape(r.cause)}">{escape(str(r))}</li>' for r in h.reasons)
        figures += f'<ul id="reasons">{reasons}</ul>' if reasons else ""
        samples = self.history.of(tid)
        span = window_ms(min([p.created_ms for p in plans if p.created_ms >= now - HOUR_MS]
                             + [s.time_ms for s in samples if s.time_ms >= now - HOUR_MS], default=None), now)
        charts = "".join([
            line_svg("lag", [(s.time_ms, s.lag_s) for s in samples], now, span, unit=" s"),
            line_svg("level-0 files", [(s.time_ms, float(s.level0_files)) for s in samples], now, span),
            line_svg("plans requested or running", [(s.time_ms, float(s.plans)) for s in samples], now, span)])
        minutes = f"last {span // 60_000} minutes"
        wanted = partition_filter(view)
        body = (f"{top}{self._notice(request)}{figures}{summary(h, stats, act, band)}{self._actions(request, tid)}"
                f"<h2>Buckets</h2>{pictures(table, splits, view, wanted)}"
                f"<h2>Partitions</h2>{partitions_section(partition_rows(table, h), view, wanted)}"
                f"<h2>Compaction plans, {minutes}</h2>{timeline_svg(plans, now, span)}{plans_section(times)}"
                f"<h2>Lag and backlog, {minutes}</h2>{charts}"
                f"<h2>Snapshots</h2>{snapshots_section(table, view)}"
                f"<h2>Schema</h2>{schema_section(table)}<h2>Options</h2>{options_section(table)}")
        return page(tid, body, refresh_s=view.refresh_s)

    def _notice(self, request: Request) -> str:
        plan = request.query.get("requested", "")
        if plan.isdigit():
            return f'<p class="note" id="requested">compaction plan {plan} requested: a compactor runs it</p>'
        return ""

    def _actions(self, request: Request, tid: str) -> str:
        """The compaction buttons, for admins only (`console_actions`)."""
        session_id = _cookie(request.headers, SESSION_COOKIE)
        if not self.admins.is_admin(request.principal, request.headers, session_id):
            return ""
        db, _, name = tid.partition(".")
        csrf = escape(self.admins.csrf_token(request.headers, session_id))
        action = escape(f"/table/{db}/{name}/compact")
        forms = "".join(
            f'<form class="inline" id="{form_id}" method="post" action="{action}">'
            f'<input type="hidden" name="{CSRF_FIELD}" value="{csrf}"><input type="hidden" name="full" value="{full}">'
            f'<button type="submit">{label}</button></form>'
            for form_id, full, label in (("compact-now", 0, "Compact now"), ("full-compaction", 1, "Full compaction")))
        return f'<div id="actions"><h2>Actions</h2>{forms}</div>'

    def compact(self, request: Request) -> Response:
        """A compaction plan of the table, asked by an admin's form (`console_actions`); back to the table's page."""
        self._refuse_cross_site(request, "compaction")
        session_id = _cookie(request.headers, SESSION_COOKIE)
        if not self.admins.is_admin(request.principal, request.headers, session_id):
            who = request.principal.name if request.principal is not None else "this caller"
            raise PermissionDeniedError(f"{who} may not request compactions: only an admin token's session may; "
                                        "nothing changed")
        form = request.body if isinstance(request.body, dict) else {}
        self.admins.check_csrf(request.headers, session_id, str(form.get(CSRF_FIELD, "")))
        full = str(form.get("full", "0"))
        if full not in ("0", "1"):
            raise InvalidInputError(f"full={full[:20]!r} must be 0 or 1; nothing changed")
        tid = self._table_id(request)
        plan = request_compaction(self.operations, tid, full == "1")
        db, _, name = tid.partition(".")
        return _redirect(f"/table/{quote(db)}/{quote(name)}?requested={plan.plan_id}")

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
        self.admins.logged_in(session_id, token)
        previous = _cookie(request.headers, SESSION_COOKIE)
        if previous is not None:  # the browser's earlier session ends: its cookie is replaced
            self.sessions.close(previous)
            self.admins.logged_out(previous)
        return _redirect("/", forget_token, f"{SESSION_COOKIE}={session_id}{self._cookie_flags}; "
                                            f"Max-Age={int(self.sessions.lifetime_s)}")

    def log_out(self, request: Request) -> Response:
        """The session ends on the server too: a copy of the cookie stops working with the browser's."""
        self._refuse_cross_site(request, "logout")
        session_id = _cookie(request.headers, SESSION_COOKIE)
        if session_id is not None and self.sessions is not None:
            self.sessions.close(session_id)
            self.admins.logged_out(session_id)
        return _redirect("/login", f"{_TOKEN_COOKIE}={self._cookie_flags}; Max-Age=0",
                         f"{SESSION_COOKIE}={self._cookie_flags}; Max-Age=0")

    def _refuse_cross_site(self, request: Request, what: str) -> None:
        reason = _cross_site(request.headers, self.tls)
        if reason is not None:
            raise PermissionDeniedError(f"refused a {what} form posted from another site ({reason}): use the form "
                                        "on this console's own page; nothing changed")
