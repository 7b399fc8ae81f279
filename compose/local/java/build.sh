#!/usr/bin/env bash
# Builds compose/local/java/Dockerfile (Debian's Java 17 on STREAMSHOP_BASE_IMAGE, default
# streamshop-base:bookworm) and prints its tag, for the Kafka and Zipkin images' build.sh:
#
#   base=$(compose/local/java/build.sh [TAG])     # default tag: streamshop-java:17
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
tag=${1:-streamshop-java:17}
base=${STREAMSHOP_BASE_IMAGE:-streamshop-base:bookworm}
docker build --quiet -f "$here/Dockerfile" --build-arg "BASE=$base" -t "$tag" "$here" > /dev/null
echo "$tag"
