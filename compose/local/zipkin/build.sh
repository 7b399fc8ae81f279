#!/usr/bin/env bash
# Builds the Zipkin image of compose/local/zipkin/Dockerfile (the compose file's `observability`
# profile on a host without an image registry):
#
#   compose/local/zipkin/build.sh [TAG]     # default tag: streamshop-zipkin:3.6.1
#
# The server's jar comes from the project's cache, where `make zipkin` (python -m
# streamshop.zipkin_jar) puts it (STREAMSHOP_ZIPKIN_CACHE moves it, as for streamshop).  The build
# context is a temporary directory holding it and bin/, as for compose/local/kafka/build.sh.
# The image is built on compose/local/java's Java 17 layer, itself on STREAMSHOP_BASE_IMAGE
# (default streamshop-base:bookworm).  Extra options after
# `--` go to `docker build`.
set -euo pipefail

version=3.6.1  # as zipkin/pom.xml
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
tag=streamshop-zipkin:$version
if [[ $# -gt 0 && $1 != -- ]]; then
  tag=$1
  shift
fi
[[ ${1-} != -- ]] || shift
jar=${STREAMSHOP_ZIPKIN_CACHE:-$repo/.cache/zipkin}/$version/lib/zipkin-server-$version-exec.jar

die() { echo "build.sh: $*" >&2; exit 1; }
[[ -f $jar ]] || die "no Zipkin $version jar at $jar: fetch it with \`make zipkin\` (or .venv/bin/python -m streamshop.zipkin_jar)"

base=$("$here/../java/build.sh")
context=$(mktemp -d "${TMPDIR:-/tmp}/streamshop-zipkin.XXXXXX")
trap 'rm -rf "$context"' EXIT
# A hard link when the cache is on the same file system, a copy otherwise.
cp -l "$jar" "$context/zipkin-server-exec.jar" 2>/dev/null || cp "$jar" "$context/zipkin-server-exec.jar"
cp -R "$here/bin" "$context/"

docker build -f "$here/Dockerfile" --build-arg "BASE=$base" -t "$tag" "$@" "$context"
