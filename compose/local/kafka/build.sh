#!/usr/bin/env bash
# Builds the Apache Kafka image of compose/local/kafka/Dockerfile (the compose file's `kafka`
# profile on a host without an image registry):
#
#   compose/local/kafka/build.sh [TAG]     # default tag: streamshop-kafka:4.1.0
#
# Kafka's jars come from the project's cache, where `make kafka` (streamshop kafka-cluster fetch)
# puts them (STREAMSHOP_KAFKA_CACHE moves it, as for streamshop).  The build context is a
# temporary directory holding them and this directory's scripts: .dockerignore keeps .cache out
# of a context at the repository root, and Docker's classic builder, unlike BuildKit's named
# contexts, takes one directory.  The image is built on compose/local/java's Java 17 layer, itself
# on STREAMSHOP_BASE_IMAGE (default streamshop-base:bookworm, made by compose/local/base.sh).  Extra options after `--` go to
# `docker build`, e.g. -- --no-cache.
set -euo pipefail

version=4.1.0  # as apache-kafka/pom.xml
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
tag=streamshop-kafka:$version
if [[ $# -gt 0 && $1 != -- ]]; then
  tag=$1
  shift
fi
[[ ${1-} != -- ]] || shift
lib=${STREAMSHOP_KAFKA_CACHE:-$repo/.cache/apache-kafka}/$version/lib

die() { echo "build.sh: $*" >&2; exit 1; }
[[ -f $lib/kafka_2.13-$version.jar && -f $lib/kafka-tools-$version.jar ]] \
  || die "no Kafka $version jars in $lib: fetch them with \`make kafka\` (or .venv/bin/streamshop kafka-cluster fetch)"

base=$("$here/../java/build.sh")
context=$(mktemp -d "${TMPDIR:-/tmp}/streamshop-kafka.XXXXXX")
trap 'rm -rf "$context"' EXIT
mkdir "$context/libs"
# Hard links when the cache is on the same file system, copies otherwise.
cp -l "$lib"/*.jar "$context/libs/" 2>/dev/null || cp "$lib"/*.jar "$context/libs/"
cp -R "$here/bin" "$here/libexec" "$here/docker" "$context/"

docker build -f "$here/Dockerfile" --build-arg "BASE=$base" -t "$tag" "$@" "$context"
