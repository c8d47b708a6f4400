"""The console's services page (`/services`): every catalog, writer and compactor that reported, up or down, with
its last heartbeat, a compactor's owned partitions of the events topic and running plans; and the warning the
other pages show when no compactor is up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

from catalog_svc import console_format as fmt
from catalog_svc.status_servicer import kind_name, service_status
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.metastore.services import MISSED_BEATS, ServiceRegistry
from lsmlake.proto_gen.lsmlake.v1 import status_pb2


def registry_of(operations: CatalogOperations) -> ServiceRegistry:
    """The services' registry in the catalog's metadata store (shared by its replicas)."""
    return ServiceRegistry(operations.store)


def statuses(registry: ServiceRegistry, now: int) -> list[status_pb2.ServiceStatus]:
    return [service_status(e, now) for e in registry.services()]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def warning(services: Sequence[status_pb2.ServiceStatus]) -> str:
    """A warning when no compactor (or no writer that reported before) is up; empty otherwise."""
    up = Counter(kind_name(s.kind) for s in services if s.up)
    known = Counter(kind_name(s.kind) for s in services)
    problems = []
    if not up["compactor"]:
        problems.append("no compactor is up: nothing compacts the tables, and a stalled table stays stalled"
                        if known["compactor"] else "no compactor has reported: nothing may be compacting the tables")
    if known["writer"] and not up["writer"]:
        problems.append("no writer is up: writes through the writer service fail")
    if not problems:
        return ""
    return (f'<p class="warning" id="services-warning">{escape("; ".join(problems))} '
            '(<a href="/services">services</a>)</p>')


def _owned(s: status_pb2.ServiceStatus) -> str:
    if s.kind != status_pb2.SERVICE_KIND_COMPACTOR:
        return ""
    if not s.total_partitions:
        return "none assigned yet"
    owned = list(s.owned_partitions)
    listed = ", ".join(str(p) for p in owned[:32]) + (", ..." if len(owned) > 32 else "")
    return f"{len(owned)} of {s.total_partitions} partitions" + (f": {listed}" if owned else "")


def _plans(s: status_pb2.ServiceStatus) -> str:
    if s.kind != status_pb2.SERVICE_KIND_COMPACTOR:
        return ""
    if not s.running_plans:
        return "none"
    return "<br>".join(
        f"{escape(p.table)} plan {escape(p.plan_id)}: {p.buckets} bucket(s){', full' if p.full else ''}, "
        f"running {fmt.duration(p.running_ms)}" + (f", {p.tasks_done} of {p.tasks_total} tasks" if p.tasks_total
                                                   else "") for p in s.running_plans)


def services_body(services: Sequence[status_pb2.ServiceStatus], now: int) -> str:
    rows = []
    for s in services:
        kind = kind_name(s.kind)
        state = ('<span class="up">UP</span>' if s.up
                 else f'<span class="down">DOWN</span> <span class="muted">{escape(s.down_reason)}</span>')
        rows.append(f'<tr class="service-row" data-kind="{kind}" data-id="{escape(s.instance_id)}" '
                    f'data-up="{str(s.up).lower()}"><td class="l">{kind}</td><td class="l">{escape(s.instance_id)}</td>'
                    f'<td class="l">{escape(s.address)}</td><td class="l">{state}</td>'
                    f'<td class="heartbeat">{fmt.duration(max(0, now - s.last_heartbeat_ms))} ago '
                    f'<span class="muted">({iso(s.last_heartbeat_ms)})</span></td>'
                    f"<td>{fmt.duration(max(0, now - s.started_ms)) if s.up else '–'}</td>"
                    f'<td class="l owned">{escape(_owned(s))}</td><td class="l plans">{_plans(s)}</td>'
                    f'<td class="l">{escape(s.detail)}</td></tr>')
    head = ('<tr><th class="l">kind</th><th class="l">id</th><th class="l">address</th><th class="l">state</th>'
            '<th>last heartbeat</th><th>up for</th><th class="l">owned buckets</th><th class="l">running plans</th>'
            '<th class="l"></th></tr>')
    counts = Counter((kind_name(s.kind), s.up) for s in services)
    summary = "; ".join(f"{k}s: {counts[(k, True)]} up, {counts[(k, False)]} down"
                        for k in ("catalog", "writer", "compactor"))
    return (f'{warning(services)}<p id="services-summary">{summary}. A service is down after {MISSED_BEATS} missed '
            "heartbeats, or at once when it says it stops. A compactor owns the buckets whose events land on its "
            "partitions of the events topic.</p>"
            f'<table id="services">{head}{"".join(rows)}</table>')
