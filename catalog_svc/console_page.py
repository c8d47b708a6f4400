"""The frame of every console page: the head (style, the refresh), the navigation, links that keep the page's
refresh setting, query parameters read with a clear refusal, paging, and the health bands' colours.

Pages refresh themselves with `<meta http-equiv="refresh">` (the policy lets no script run): every
`REFRESH_S` seconds unless the address says `?refresh=0` (off) or another number of seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import urlencode

from lsmlake.errors import InvalidInputError
from lsmlake.rest.http_server import Response

HTML = "text/html; charset=utf-8"
REFRESH_S = 15
_STYLE = ("body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin-bottom:.6em}"
          "td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}td.l,th.l{text-align:left}"
          ".bar{display:inline-block;height:10px;vertical-align:middle}.stalled,.down{color:#c0392b;font-weight:bold}"
          ".up{color:#2e7d32;font-weight:bold}.buckets{display:flex;flex-wrap:wrap;gap:14px}form.logout{float:right}"
          "nav{margin-bottom:1em}nav a{margin-right:1em}.band{display:inline-block;padding:0 6px;border-radius:3px;"
          "color:#fff;font-weight:bold}.band-green{background:#2e7d32}.band-amber{background:#c77c02}"
          ".band-red{background:#c0392b}.warning{background:#fdecea;border:1px solid #c0392b;padding:6px 10px}"
          ".note{background:#eef6ee;border:1px solid #2e7d32;padding:6px 10px}.pager a,.pager span{margin-right:.6em}"
          "form.inline{display:inline;margin-right:1em}.muted{color:#777}")
HEADERS = (("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
           ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                                       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"))
LOGOUT = '<form class="logout" method="post" action="/logout"><button type="submit">Log out</button></form>'
# health bands of the score (0..100): green from 80, amber from 50, red below
BANDS = ((80, "green"), (50, "amber"), (0, "red"))
_BAND_COLOURS = {"green": "#2e7d32", "amber": "#c77c02", "red": "#c0392b"}
_SEVERITY_COLOURS = {"good": "green", "warning": "amber", "bad": "red"}  # `lsmlake.catalog.health_score.band`


def page(title: str, body: str, status: int = 200, headers: tuple[tuple[str, str], ...] = (),
         refresh_s: int = 0) -> Response:
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s > 0 else ""
    text = (f'<!doctype html><html><head><meta charset="utf-8">{refresh}<title>{escape(title)} - lsmlake</title>'
            f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>")
    return Response(text, status, HTML, HEADERS + headers)


def int_param(query: Mapping[str, str], name: str, default: int, least: int, most: int) -> int:
    """The query's whole number `name` in least..most (`default` when absent); InvalidInputError otherwise."""
    text = query.get(name, "").strip()
    if not text:
        return default
    if not (text.isdigit() and least <= int(text) <= most):
        raise InvalidInputError(f"{name}={text[:40]!r} is not a whole number in {least}..{most}")
    return int(text)


def text_param(query: Mapping[str, str], name: str, most: int = 200) -> str:
    text = query.get(name, "").strip()
    if len(text) > most:
        raise InvalidInputError(f"{name} has {len(text)} characters; at most {most}")
    return text


@dataclass(frozen=True)
class View:
    """The page's address: its path and query, and how often it refreshes (0: never)."""

    path: str
    query: Mapping[str, str]
    refresh_s: int

    @staticmethod
    def of(path: str, query: Mapping[str, str]) -> View:
        return View(path, query, int_param(query, "refresh", REFRESH_S, 0, 3600))

    def url(self, path: str | None = None, /, **params: Any) -> str:
        """A link to `path` (this page's when None) with `params` over this page's query (a None value drops
        one), keeping the refresh setting."""
        merged: dict[str, Any] = dict(self.query) if path is None else {}
        merged.update(params)
        if self.refresh_s != REFRESH_S and "refresh" not in params:
            merged["refresh"] = self.refresh_s
        clean = {k: v for k, v in merged.items() if v is not None and v != ""}
        return (path or self.path) + (f"?{urlencode(clean)}" if clean else "")

    def nav(self, logout: bool) -> str:
        """The links between the pages, the refresh setting and the logout button."""
        if self.refresh_s:
            state = (f'refreshes every {self.refresh_s} s · <a id="refresh-off" href="{escape(self.url(refresh=0))}">'
                     "stop refreshing</a>")
        else:
            state = (f'not refreshing · <a id="refresh-on" href="{escape(self.url(refresh=REFRESH_S))}">'
                     f"refresh every {REFRESH_S} s</a>")
        return (f'{LOGOUT if logout else ""}<nav><a href="{escape(self.url("/"))}">Tables</a>'
                f'<a href="{escape(self.url("/services"))}">Services</a><span class="muted">{state}</span></nav>')


def pager(name: str, total: int, number: int, size: int, view: View, what: str) -> tuple[int, int, str]:
    """Page `number` (from 1) of `total` items, `size` a page: (first index, end index, the pager's HTML)."""
    pages = max(1, -(-total // size))
    number = min(number, pages)
    start, end = (number - 1) * size, min(total, number * size)
    links = []
    if number > 1:
        links.append(f'<a class="prev" href="{escape(view.url(**{name: number - 1}))}">previous</a>')
    links.append(f"<span>{what} {start + 1 if total else 0}–{end} of {total:,} (page {number} of {pages})</span>")
    if number < pages:
        links.append(f'<a class="next" href="{escape(view.url(**{name: number + 1}))}">next</a>')
    return start, end, f'<p class="pager" id="pager-{escape(name)}">{"".join(links)}</p>'


def filter_form(name: str, value: str, view: View, label: str, keep: Callable[[str], bool]) -> str:
    """A GET form for one text filter; the other query parameters `keep` accepts ride along hidden."""
    hidden = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
                     for k, v in view.query.items() if keep(k) and k != name)
    return (f'<form class="inline" id="filter-{escape(name)}" method="get" action="{escape(view.path)}">'
            f'<label>{escape(label)} <input name="{escape(name)}" value="{escape(value)}"></label>{hidden} '
            f'<button type="submit">Filter</button></form>')


def band_of(score: int, severity: str | None = None) -> str:
    """The colour of a health score: of the health's own `severity` (good, warning, bad: a stalled or unreadable
    table is bad whatever its score), else by `BANDS`."""
    if severity in _SEVERITY_COLOURS:
        return _SEVERITY_COLOURS[severity]
    return next(b for least, b in BANDS if score >= least)


def score_html(score: int, band: str) -> str:
    return (f'<span class="band band-{band}" data-band="{band}">{score}</span> '
            f'<span class="bar" style="width:{max(0, score)}px;background:{_BAND_COLOURS[band]}"></span>')
