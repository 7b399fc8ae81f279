#!/usr/bin/env bash
# The five images compose/local.env names, made on this host from Debian's packages and Maven
# Central's jars, for a Docker engine that reaches no image registry:
#
#   sudo compose/local/build.sh
#   docker compose --env-file .env --env-file compose/local.env up --build --wait
#
# STREAMSHOP_BASE_IMAGE: Debian bookworm with Python 3.11 (compose/local/base.sh), kept while
# that script is unchanged; the Dockerfile's two images build on it (compose's --build).
# KAFKA_IMAGE: the Apache Kafka release `streamshop kafka-cluster` runs, from the jars `make kafka`
# fetched, on Debian's Java 17.  POSTGRES_IMAGE: Debian's PostgreSQL 15.  ZIPKIN_IMAGE and
# PROMETHEUS_IMAGE, the `observability` profile's: Zipkin's server from the jar `make zipkin`
# fetched, on Debian's Java 17, and Debian's Prometheus.  Docker's build cache makes a rebuild of
# an unchanged recipe take seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
set -a
# shellcheck source=../local.env
. compose/local.env
set +a

die() { echo "build.sh: $*" >&2; exit 1; }
timeout 20 docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
  || die "no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}): start dockerd"

recipe=$(sha256sum compose/local/base.sh | cut -c1-12)
if docker image inspect -f '{{.Comment}}' "$STREAMSHOP_BASE_IMAGE" 2>/dev/null | grep -qF "base.sh $recipe"; then
  echo "$STREAMSHOP_BASE_IMAGE: kept (compose/local/base.sh $recipe)"
else
  compose/local/base.sh "$STREAMSHOP_BASE_IMAGE"
fi

compose/local/kafka/build.sh "$KAFKA_IMAGE" -- --quiet > /dev/null
echo "$KAFKA_IMAGE: built"

docker build --quiet --build-arg BASE="$STREAMSHOP_BASE_IMAGE" -t "$POSTGRES_IMAGE" \
  -f compose/local/postgres/Dockerfile compose/local/postgres > /dev/null
echo "$POSTGRES_IMAGE: built"

compose/local/zipkin/build.sh "$ZIPKIN_IMAGE" -- --quiet > /dev/null
echo "$ZIPKIN_IMAGE: built"

docker build --quiet --build-arg BASE="$STREAMSHOP_BASE_IMAGE" -t "$PROMETHEUS_IMAGE" \
  -f compose/local/prometheus/Dockerfile compose/local/prometheus > /dev/null
echo "$PROMETHEUS_IMAGE: built"
