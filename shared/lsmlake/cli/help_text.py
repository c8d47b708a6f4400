"""The help texts of `lake` and its commands (the epilogs `--help` prints after the options).

The README documents the CLI with the same words: a change here is a change of the documented behaviour.
"""

MAIN_EPILOG = """\
examples:
  export LAKE_WAREHOUSE=/data/lake
  lake table create shop.orders --schema "id BIGINT NOT NULL, dt STRING, amount DECIMAL(10,2)" \\
      --primary-key id,dt --partition-key dt --option bucket=4
  lake write shop.orders day1.parquet day2.csv
  lake scan shop.orders --format table --limit 20
  lake scan shop.orders --snapshot 3 --format parquet --output orders-v3.parquet
  lake snapshots shop.orders --format table
  lake files shop.orders --format table
  lake levels shop.orders                                 # the LSM levels of every bucket
  lake compact shop.orders --partition dt=2024-01-31
  lake compact shop.orders --full

The warehouse is a local folder (or an object-store URI) given by --warehouse or $LAKE_WAREHOUSE.
Exit status: 0 on success, 1 on an error (message on stderr), 2 on bad usage.
Run `lake COMMAND --help` for the options of a command.
"""

TABLE_EPILOG = """\
examples:
  lake table create shop.orders --schema "id BIGINT NOT NULL, dt STRING, amount DECIMAL(10,2)" \\
      --primary-key id,dt --partition-key dt --option bucket=4
  lake table list shop
  lake table describe shop.orders --format json
  lake table alter shop.orders --add-column "coupon STRING" --rename-column note=remark
  lake table drop shop.orders

Run `lake table ACTION --help` for the options of an action.
"""

CREATE_EPILOG = """\
examples:
  lake table create shop.orders \\
      --schema "id BIGINT NOT NULL, dt STRING, amount DECIMAL(10,2), ts TIMESTAMP(3)" \\
      --primary-key id,dt --partition-key dt --option bucket=4
  lake table create logs.events --schema "ts TIMESTAMP(6), host STRING, msg STRING, tags ARRAY<STRING>"

Types are Paimon's SQL type names: BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE,
DECIMAL(p,s), CHAR(n), VARCHAR(n), STRING, BINARY(n), VARBINARY(n), BYTES, DATE, TIME(p),
TIMESTAMP(p), TIMESTAMP(p) WITH LOCAL TIME ZONE, ARRAY<t>, MAP<k,v>, ROW<name t, ...>; add NOT NULL
to forbid nulls. Primary-key tables need --option bucket=N (N > 0) and their primary key must
include the partition keys. The database is created when it does not exist.
"""

LIST_EPILOG = """\
examples:
  lake table list shop
  lake table list shop --format jsonl
"""

DESCRIBE_EPILOG = """\
examples:
  lake table describe shop.orders
  lake table describe shop.orders --format json | jq .columns

json/jsonl print one object: table, schema_id, columns (id, name, type, nullable),
partition_keys, primary_keys, options, comment.
"""

ALTER_EPILOG = """\
examples:
  lake table alter shop.orders --add-column "coupon STRING"
  lake table alter shop.orders --rename-column note=remark --set snapshot.num-retained.min=20
  lake table alter shop.orders --remove snapshot.num-retained.min

The changes are applied in the order given and published as ONE new schema version, or not at
all. Data files are not rewritten: rows written before read an added column as null and a renamed
column under its new name. Added columns must be nullable and go at the end; key columns and
columns named by options cannot be renamed; options that fix the table's layout (bucket,
merge-engine, deletion-vectors.enabled, ...) cannot change once the table has data.
"""

DROP_EPILOG = """\
examples:
  lake table drop shop.orders
  lake table drop shop.orders --if-exists

This deletes the table folder with all its data and snapshots.
"""

WRITE_EPILOG = """\
examples:
  lake write shop.orders orders.parquet
  lake write shop.orders day1.csv day2.jsonl         # both files in one commit
  cat rows.jsonl | lake write shop.orders - --input-format jsonl
  printf '_row_kind,id,dt\\n-D,42,2024-01-31\\n' | lake write shop.orders - --input-format csv
  lake write shop.orders big.parquet --request-id load-2024-01-31  # safe to run again after a failure

input files:
  The format comes from the extension: .parquet, .csv, .jsonl/.ndjson, or .json (JSON lines, or
  one JSON array of objects); .gz/.bz2/.zst/.lz4 compressed CSV and JSON files are read too.
  Use '-' for stdin together with --input-format. Columns are matched by name: missing nullable
  columns are null, a column the table does not have is an error.
  CSV and JSON values are parsed with the table's column types: DECIMAL as 12.34 (number or
  string), DATE as 2024-01-31, TIME as 12:30:00.5, TIMESTAMP as 2024-01-31T12:30:00.123
  (TIMESTAMP WITH LOCAL TIME ZONE takes an offset such as Z or +02:00; none means UTC),
  BINARY/BYTES as base64, ARRAY/ROW as JSON arrays/objects and MAP as a JSON object or a list of
  [key, value] pairs (in CSV a cell holds the JSON text). CSV needs a header row; an empty
  unquoted cell, NULL or null is a null, a quoted "" is the empty string.

row kinds:
  An optional _row_kind column holds +I (insert, also when empty), -U (update before),
  +U (update after) or -D (delete) for each row. Primary-key tables keep the newest row of each
  key; -U and -D remove the key. Append tables accept only +I.

commit:
  All files of one invocation are written as ONE commit (one snapshot). Every file is read and
  checked before anything is written; if anything fails, nothing is committed and the data files
  already written are deleted. Readers see all of the rows or none of them.
  Prints: wrote R rows from F files to DB.TABLE in snapshot S: N data files, SIZE, SECONDS.
  Through a cluster (`lake up`, or --catalog-service) it is ONE commit too, of any size: the data
  files are written into the warehouse by this command, numbered with the catalog's sequence numbers
  (and buckets, for bucket = -1), and committed once through the catalog service. With
  --request-id ID a run after a failure can be repeated as is: a run after a success finds the first
  run's snapshot and writes nothing. Only a caller the catalog does not let number rows (with tokens:
  role writer; it needs service or admin) writes through the writer service instead, in parts of
  100,000 rows, each its own commit, and the output says so: "in N commits ..., which readers may see
  one by one".
  A postpone-bucket table (bucket = -2) keeps written rows in bucket-postpone, unread until a
  compaction places them: the command prints how many wait and what places them.
  On a terminal a progress line on stderr shows rows, rate and time left.
"""

SCAN_EPILOG = """\
examples:
  lake scan shop.orders                                   # JSON lines on stdout
  lake scan shop.orders --format table --limit 10
  lake scan shop.orders --columns id,amount --format csv --output orders.csv
  lake scan shop.orders --snapshot 2 --format parquet --output orders-v2.parquet

output formats:
  jsonl    one JSON object per row with the table's column names. DECIMAL, DATE, TIME and
           TIMESTAMP values are strings (ISO 8601, e.g. 2024-01-31T12:30:00.000, with a Z for
           TIMESTAMP WITH LOCAL TIME ZONE), BINARY/BYTES are base64 strings, ARRAY and ROW are
           JSON arrays and objects, MAP is an object when its keys are strings and a list of
           [key, value] pairs otherwise; non-finite floats are the strings NaN, Infinity, -Infinity.
  csv      a header row, then one line per row; strings are quoted, nulls are empty, BINARY is
           base64 and nested values are JSON texts (readable again by `lake write`).
  parquet  the table's Arrow schema (needs --output).
  table    an aligned text table for people.
The rows are those of the latest snapshot, or of --snapshot N (time travel).

--where PREDICATE keeps the rows where it holds: `column OP literal` (OP = != <> < <= > >=),
`column IN (lit, ...)`, `column IS [NOT] NULL`, joined by AND and OR, with parentheses; text literals
in single quotes ('it''s'), numbers bare, each parsed with its column's type:
  lake scan shop.orders --where "dt = '2024-01-01' AND (id < 3 OR id IS NULL)"
Several --where, and --partition KEY=VALUE, must all hold. Partitions and files that cannot match are
skipped (through a cluster the catalog plans the scan), then the rows are filtered.
With --output the command ends with: wrote R rows, SIZE, 1 file, SECONDS to FILE from DB.TABLE
snapshot S. A postpone-bucket table's rows that wait for placement are not read; a note on stderr
counts them.
"""

DELETE_EPILOG = """\
Append tables with deletion-vectors.enabled = true delete rows without rewriting files: the
positions of the matching rows go into the bucket's deletion vectors, committed as one OVERWRITE
snapshot. (Primary-key tables delete by writing -D rows: `lake write` with a _row_kind column.)

--where takes the predicate language of `lake scan --where` (COLUMN=VALUE is one of its terms);
several --where must all hold.

examples:
  lake --warehouse wh delete db.events --where dt=2026-11-21 --where user_id=42
  lake --warehouse wh delete db.events --where "dt = '2026-11-21' AND (user_id = 42 OR user_id IS NULL)"
"""

CHANGELOG_EPILOG = """\
Tables with a changelog producer (option changelog-producer = input, full-compaction or lookup)
record what changed with each snapshot; streaming readers consume it. Each row carries the
snapshot that committed it and its row kind (+I, -U, +U, -D), then the table's columns.

examples:
  lake --warehouse wh changelog db.t
  lake --warehouse wh changelog db.t --from-snapshot 5 --format table
"""

SNAPSHOTS_EPILOG = """\
examples:
  lake snapshots shop.orders
  lake snapshots shop.orders --format table

Each snapshot is one object: id, schema_id, commit_kind, time_millis, total_record_count,
delta_record_count, commit_user, commit_identifier.
"""

TIMELINE_EPILOG = """\
examples:
  lake timeline shop.orders
  lake timeline shop.orders --state INFLIGHT --state REQUESTED --format jsonl
  lake timeline shop.orders --metastore postgresql://lake@db:5432/lake

Each compaction plan of the catalog service: plan_id, state (REQUESTED, INFLIGHT, COMPLETED,
ROLLED_BACK, ABANDONED), buckets, files, output_level, owner, attempts, age (since it was
requested), running (since its current run started, INFLIGHT only), snapshot (of its COMPACT
commit) and reason. The metadata store defaults to the catalog service's SQLite file in a local
warehouse ($LSMLAKE_METASTORE overrides).
"""

PRODUCE_EPILOG = """\
examples:
  lake produce shop.orders rows.jsonl                      # {"id": 1, "v": "a"} per line, optional _row_kind
  lake produce shop.orders changes.jsonl --format debezium # Debezium envelopes, with or without schema

Sends each line as one message to lake.ingest.DB.TABLE, keyed by the row's primary key so that the
changes of a key stay in order; the writer service ingests the topic exactly once when it was started
with --ingest DB.TABLE[:FORMAT]. Needs a cluster (`lake up`) or --kafka-bootstrap HOST:PORT.
"""

UP_EPILOG = """\
examples:
  lake up --warehouse wh                       # Kafka (embedded), catalog, writer, compactor; Ctrl-C stops
  lake up --warehouse wh --kafka kafka:9092    # an existing Kafka instead of the embedded broker
  lake up --warehouse wh --ingest shop.orders:debezium --no-compactor
  lake up --warehouse wh --rest-port 0         # the REST catalog on a free port
  lake up --warehouse wh --ui-port 9090        # the web console on port 9090
  lake up --warehouse s3://bucket/wh           # on object storage; S3 settings from AWS_* or the URI
  lake up --s3                                 # a local S3 server (moto) and s3://lake/warehouse in it

The endpoints are printed and recorded in WAREHOUSE/.lake/cluster.json; `lake status` and
`lake down` find them there. Logs go to WAREHOUSE/.lake/logs/.

An object-store warehouse keeps that state, the logs and the catalog's SQLite metastore (unless
--metastore names another) in a local state folder, ~/.lake/clusters/<bucket and prefix>
(--state-dir or $LAKE_STATE_DIR to choose it); every `lake` command given the same warehouse
URI (with or without its query string) finds the cluster and its S3 endpoint there. The services
get the URI without credentials and the S3 settings (AWS environment < the URI's own) through
their environment. `--s3` needs moto's server mode (pip install "moto[server]"); its objects live
in memory and are gone once the cluster stops.

The catalog also serves Paimon's REST catalog API at the printed `rest` URI (default
http://127.0.0.1:8181, or a free port when 8181 is in use): Paimon engines use the cluster's
catalog with metastore=rest and uri=that URI (any warehouse name; pypaimon also wants a token,
any one when none is checked). With LSMLAKE_TLS_CERT set the URI is https, and a token file
(LSMLAKE_AUTH_TOKENS) applies to it as to gRPC.

The catalog also serves its web console at the printed `console` address (default
http://127.0.0.1:8080/, or a free port when 8080 is in use): the tables ranked by health, each
bucket's sorted runs, the compaction timeline. It takes the same TLS and token file; with tokens
checked, log in at /login with a token of role reader.
"""

FILES_EPILOG = """\
examples:
  lake files shop.orders
  lake files shop.orders --snapshot 3 --format table

Each live data file of the snapshot (default: the latest) is one object with:
  partition  the partition directory as stored on disk: `key=value/...` with Hive-style escaping
             and Paimon's value strings (e.g. dt=2024-01-31/h=3; a DATE value is its day number,
             as Paimon names the folder); "" for an unpartitioned table
  bucket, file (the data file name), level, rows, min_seq, max_seq (sequence number range),
  size (bytes), schema_id, delete_rows (retract rows in the file, when recorded).
"""

COMPACT_EPILOG = """\
examples:
  lake compact shop.orders                                # what the compaction strategy says is due
  lake compact shop.orders --full                         # every bucket into one sorted run
  lake compact shop.orders --partition dt=2024-01-31
  lake compact shop.orders --partition dt=2024-01-31 --partition h=3 --full

Each bucket (of the matching partitions) is compacted once, and all changes are committed as ONE
COMPACT snapshot; the rows a scan returns do not change. Primary-key tables merge sorted runs as the
universal strategy picks them (options num-sorted-run.compaction-trigger, compaction.size-ratio,
compaction.max-size-amplification-percent); --full merges everything onto the highest level and
drops deleted rows. Append tables concatenate small files (compaction.min.file-num, --full: all).
--partition KEY=VALUE (repeatable, for different partition columns) restricts the compaction to the
partitions whose columns equal the values; a value is parsed with the column's type (a DATE as
2024-01-31), and the table's partition.default-name (__DEFAULT_PARTITION__) means null.
A partition that does not exist is an error (the table's partitions are listed).
Prints: compacted DB.TABLE in snapshot S: F files -> G files in B buckets; wrote R rows, SIZE,
N files, SECONDS (files rewritten or moved, and their replacements), or: nothing to compact in
DB.TABLE (SECONDS). On a terminal a line on stderr shows how long it has been running.
Through a cluster (`lake up`, or --compactor-service), the compactor service compacts and the command
waits for it, up to --timeout SECONDS (default 60; the line on stderr counts the time): it prints how
many of the named buckets were compacted and the COMPACT snapshots, then each bucket that was not
(owned by another compactor replica, its plan failed, or timed out) with the reason; buckets still
queued at the timeout are compacted later.
"""

LEVELS_EPILOG = """\
examples:
  lake levels shop.orders
  lake levels shop.orders --snapshot 3
  lake levels shop.orders --format jsonl | jq 'select(.level == 0)'

For every (partition, bucket) a header, then the files of each non-empty level, e.g.
  dt=2024-01-31 bucket 0: 3 sorted runs, highest level 5 (max 5), 12.5 MB
    L0  run 1: data-1f0c...-0.parquet   1.2 MB  10,000 rows  keys [1 .. 9999]       seq 201-300
        run 2: data-77ab...-0.parquet   1.1 MB   9,000 rows  keys [5 .. 20000]      seq 101-200
    L5  run 3: data-0d3e...-0.parquet   8.0 MB  72,000 rows  keys [1 .. 72000]      seq 0-100
               data-5a91...-0.parquet   2.2 MB  18,000 rows  keys [72001 .. 90000]  seq 0-100
Level 0 holds one sorted run per file, newest first; every higher level holds one sorted run whose
files are listed in key order. Runs are numbered newest first, as compaction sees them. Keys are
the primary key without the partition keys, a tuple when there are several. A bucket with more
sorted runs than num-sorted-run.stop-trigger is marked STALL: writers would wait for compaction
there (run `lake compact`). Append tables have no keys; their files all stay on level 0.
The partition is key=value/... with values as `lake scan` prints them (the form --partition of
`lake compact` takes), not the escaped folder name `lake files` shows.
jsonl prints one object per file: partition, bucket, level, run, file, size (bytes), rows, min_key,
max_key (lists; empty for append tables), min_seq, max_seq.
"""

RESCALE_EPILOG = """\
examples:
  lake rescale shop.events --buckets 8                        # every partition of a bucket = -2 table
  lake rescale shop.events --buckets 2 --partition dt=2024-01-31

A postpone-bucket table (bucket = -2) gives each partition its own bucket count when its rows are first
placed (postpone.default-bucket-num, postpone.target-row-num-per-bucket, postpone.target-size-per-bucket).
This changes it: each matching partition's merged rows are rewritten into N buckets and the old files
dropped, in ONE OVERWRITE snapshot, so readers see the old buckets or the new ones, never a mix. Rows
still waiting in bucket-postpone are placed later with the new count. Through a cluster the new files are
written into the warehouse and committed through the catalog service (an admin token).
Prints: rescaled DB.TABLE in snapshot S: P partitions now have N buckets, or: nothing to rescale.
"""

HEALTH_EPILOG = """\
examples:
  lake health                          # every table, the worst first
  lake health shop.orders
  lake health --database shop --format jsonl

Per table, from its latest snapshot: the score (100 best) and its band (good >= 80, warning 50..79, bad),
the lag (how long the compaction now due has waited: 0 when compaction would leave the table alone, however
old its data), the buckets with a compaction due, the sorted runs of its worst bucket against
num-sorted-run.compaction-trigger..stop-trigger (STALLED: writers wait) or, for an append table, its small
files against compaction.min.file-num..max.file-num, level-0 files, pending compaction plans (REQUESTED,
INFLIGHT) and the age of the oldest (from the catalog's metadata store when the warehouse has one), and the
reasons for the points lost. The formula: docs/operating-tables.md. Stalled tables come first, then the
lowest score.
"""
