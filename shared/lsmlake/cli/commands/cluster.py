"""`lake up | status | down`: the whole cluster on this machine, on a local warehouse folder or an object-store
warehouse, optionally on a local S3 server it starts (`lake up --s3`; see `cli.cluster`)."""

from __future__ import annotations

import argparse
import json
import sys

from lsmlake.cli.cluster import (
    Cluster,
    check_ports,
    check_rest_port,
    check_ui_port,
    down,
    is_remote,
    status,
    warehouse_key,
)
from lsmlake.cli.errors import UsageError
from lsmlake.cli.records import out
from lsmlake.cli.warehouse import ENV_WAREHOUSE, state_dir_arg, warehouse_dir, warehouse_of

#: the warehouse of `lake up --s3` when no s3:// warehouse is given
LOCAL_S3_WAREHOUSE = "s3://lake/warehouse"


def _up_warehouse(args: argparse.Namespace) -> str:
    if not args.s3:
        return warehouse_dir(args)
    given = warehouse_of(args)
    if not given:
        return LOCAL_S3_WAREHOUSE
    if not given.startswith("s3://"):
        source = "--warehouse" if args.warehouse else f"${ENV_WAREHOUSE}"
        raise UsageError(f"--s3 runs the cluster on an s3:// warehouse in a local S3 server; {source} is "
                         f"{given!r}: give an s3://BUCKET/PREFIX warehouse, or none for {LOCAL_S3_WAREHOUSE}")
    return warehouse_key(given)  # the local server takes no settings from the URI: it has its own


def cmd_up(args: argparse.Namespace) -> int:
    ports = check_ports({"catalog": args.catalog_port, "writer": args.writer_port,
                         "compactor": args.compactor_port})
    # a default HTTP port steps aside for the ports given, rather than failing the start on a clash
    rest_port = check_rest_port(args.rest_port, [*ports.values(), *([args.ui_port] if args.ui_port else [])])
    ui_port = check_ui_port(args.ui_port, [*ports.values(), rest_port])
    cluster = Cluster(_up_warehouse(args), kafka=args.kafka, ports=ports, compactor=not args.no_compactor,
                      spark_master=args.spark_master, commit_interval_s=args.commit_interval, ingest=args.ingest,
                      rest_port=rest_port, ui_port=ui_port, state_dir=state_dir_arg(args),
                      metastore=args.metastore, local_s3=args.s3)
    sys.stderr.write("starting " + ("a local S3 server, " if args.s3 else "") + "Kafka, catalog, writer"
                     + (", compactor" if not args.no_compactor else "") + " ...\n")
    state = cluster.start()
    if state.s3_server:
        out(f"s3         {state.s3_server}  (local S3 server, moto: objects live in memory until the cluster "
            "stops; any access key is accepted)")
    if is_remote(state.warehouse):
        out(f"warehouse  {state.warehouse}")
        out(f"state      {state.state_dir}  (metastore, logs; other `lake` commands find it from the warehouse)")
    out(f"kafka      {state.kafka}" + ("  (embedded Tansu broker)" if state.embedded_kafka else ""))
    out(f"catalog    {state.catalog}")
    if state.rest:
        out(f"rest       {state.rest}  (REST catalog: Paimon metastore=rest)")
    if state.console:
        out(f"console    {state.console}  (web console: tables by health)")
    out(f"writer     {state.writer}")
    if state.compactor:
        out(f"compactor  {state.compactor}")
    out(f"logs       {state.logs}")
    out("cluster is up; Ctrl-C (or `lake down`) stops it")
    sys.stdout.flush()
    died = cluster.wait()
    if died:
        sys.stderr.write(f"the {died} stopped unexpectedly; stopping the cluster (see {state.logs})\n")
    codes = cluster.stop()
    failed = [f"{n} exited with {c}" for n, c in codes if c not in (0, None)]
    if failed:
        sys.stderr.write("; ".join(failed) + "\n")
    out("cluster stopped")
    return 1 if died or failed else 0


def cmd_status(args: argparse.Namespace) -> int:
    info = status(warehouse_dir(args), state_dir_arg(args))
    if args.format == "json":
        out(json.dumps(info))
    else:
        out(f"lake up    pid {info['pid']} ({'running' if info['running'] else 'gone'})")
        if info["s3_server"]:
            out(f"s3         {info['s3_server']}  (local S3 server)")
        if is_remote(info["warehouse"]):
            out(f"warehouse  {info['warehouse']}")
            out(f"state      {info['state_dir']}")
        out(f"kafka      {info['kafka']}" + ("  (embedded)" if info["embedded_kafka"] else ""))
        for name, s in info["services"].items():
            out(f"{name:10s} {s['endpoint']}  {'SERVING' if s['serving'] else 'NOT SERVING'}")
            if name == "catalog" and info["rest"]:  # served by the catalog process, beside its gRPC port
                out(f"rest       {info['rest']}  (REST catalog: Paimon metastore=rest)")
            if name == "catalog" and info["console"]:
                out(f"console    {info['console']}  (web console: tables by health)")
    ok = info["running"] and all(s["serving"] for s in info["services"].values())
    return 0 if ok else 1


def cmd_down(args: argparse.Namespace) -> int:
    down(warehouse_dir(args), state_dir=state_dir_arg(args))
    out("cluster stopped")
    return 0
