# syntax=docker/dockerfile:1.7
# One image for all lsmlake services. It has no ENTRYPOINT: the Helm chart (or `docker run IMAGE CMD`)
# picks the command, one of the console scripts of pyproject.toml: catalog-svc, writer-svc,
# compactor-svc or lake. Spark on Kubernetes starts its executor pods from this image too, with the
# single argument `executor` (see /usr/local/bin/executor below).
#
#   docker build -t lsmlake:0.1.0 .
#   docker run --rm lsmlake:0.1.0 catalog-svc --help
#
# Debian bookworm: its openjdk-17-jre-headless is the Java 17 that pyspark 4.0 runs on.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/lsmlake
ENV PATH=/opt/lsmlake/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY scripts ./scripts
COPY shared ./shared
COPY catalog_svc ./catalog_svc
COPY writer_svc ./writer_svc
COPY compactor_svc ./compactor_svc
# The same steps as `make venv`: the protobuf code is generated (never committed) by
# scripts/gen_proto.py with the generators pinned in pyproject.toml, then the package is installed
# with it. The pins are read from pyproject.toml so that they live in one place.
RUN python -c 'import tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; \
print("\n".join(d for d in deps if d.split("=")[0].strip() in ("grpcio-tools", "mypy-protobuf")))' \
        > /tmp/generators.txt \
    && pip install -r /tmp/generators.txt \
    && python scripts/gen_proto.py \
    && pip install . \
    && python -c 'import lsmlake.proto_gen.lsmlake.v1.catalog_pb2'

FROM ${PYTHON_IMAGE}
# Java 17 for Spark (the man folder is missing in slim images and the JRE's postinst needs it);
# tini is not needed: every service handles SIGTERM itself.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 lsmlake \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/lsmlake --create-home --shell /usr/sbin/nologin lsmlake
COPY --from=build /opt/lsmlake /opt/lsmlake
ENV PATH=/opt/lsmlake/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYSPARK_PYTHON=/opt/lsmlake/bin/python \
    HOME=/home/lsmlake \
    LSMLAKE_LOG_FORMAT=json

# Spark on Kubernetes gives executor pods the argument `executor` and no command. Spark's own images
# answer it in their entrypoint script; this image has no entrypoint, so `executor` is a command on
# PATH that starts the executor backend from the jars that pyspark ships.
COPY --chmod=0755 <<'EOF' /usr/local/bin/executor
#!/bin/bash
set -euo pipefail
spark_home="${SPARK_HOME:-$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"
# Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order
java_opts=()
while IFS= read -r name; do
    java_opts+=("${!name}")
done < <(compgen -e | grep '^SPARK_JAVA_OPT_[0-9]*$' | sort -t_ -k4 -n || true)
exec java "${java_opts[@]}" \
    -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
    -cp "${spark_home}/jars/*${SPARK_DIST_CLASSPATH:+:$SPARK_DIST_CLASSPATH}" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "${SPARK_DRIVER_URL}" \
    --executor-id "${SPARK_EXECUTOR_ID}" \
    --cores "${SPARK_EXECUTOR_CORES}" \
    --app-id "${SPARK_APPLICATION_ID}" \
    --hostname "${SPARK_EXECUTOR_POD_IP}" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
    --podName "${SPARK_EXECUTOR_POD_NAME}"
EOF

# Every command the chart runs must exist in the image (tests/test_helm.py reads this line).
RUN catalog-svc --help >/dev/null && writer-svc --help >/dev/null && compactor-svc --help >/dev/null \
    && lake --help >/dev/null && java -version 2>/dev/null && command -v executor >/dev/null

USER 10001:10001
WORKDIR /home/lsmlake
CMD ["catalog-svc", "--help"]
