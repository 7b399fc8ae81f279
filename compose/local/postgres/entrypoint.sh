#!/usr/bin/env bash
# The part of the official postgres image's docker-entrypoint.sh that docker-compose.yml relies
# on.  On the first start (no PG_VERSION in PGDATA): initdb with POSTGRES_USER (default postgres)
# as superuser and POSTGRES_PASSWORD as its password, UTF8; password logins (scram-sha-256, or
# POSTGRES_HOST_AUTH_METHOD) from any address; POSTGRES_DB (default POSTGRES_USER) created; the
# *.sql and *.sh files of /docker-entrypoint-initdb.d run in sorted order.  That happens on a
# server reachable through a private socket only, so that neither clients nor the `pg_isready`
# healthcheck see it before it is done.  Then, and on every later start (the data kept as it is),
# the server in the foreground on every interface: the entrypoint execs it, so the container's
# stop signal reaches it.  Everything it logs goes to stderr.
set -Eeuo pipefail
shopt -s nullglob

export PGDATA=${PGDATA:-/var/lib/postgresql/data}
me=entrypoint

[ $# -gt 0 ] || set -- postgres
# As the official image: options alone (`-c name=value`) are the server's.
if [ "${1:0:1}" = - ]; then
  set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
  exec "$@"  # another command (psql, a shell): as is
fi

if [ "$(id -u)" = 0 ]; then
  # A bind mount or a volume made elsewhere may belong to root: hand it to postgres (only what
  # is not its already), then drop root for good.
  mkdir -p "$PGDATA" /var/run/postgresql
  find "$PGDATA" \! -user postgres -exec chown postgres:postgres '{}' +
  chmod 700 "$PGDATA"  # PostgreSQL refuses a data directory that others can read
  chown postgres:postgres /var/run/postgresql
  export HOME=/var/lib/postgresql
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  user=${POSTGRES_USER:-postgres}
  database=${POSTGRES_DB:-$user}
  method=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$method" != trust ]; then
    cat >&2 <<EOF
$me: error: the database is uninitialised and POSTGRES_PASSWORD is empty.
  Set POSTGRES_PASSWORD to a non-empty password for the superuser ($user), or set
  POSTGRES_HOST_AUTH_METHOD=trust to allow every connection without a password (not advised).
EOF
    exit 1
  fi

  private=$(mktemp -d)  # the password file, then the initialising server's socket
  trap 'pg_ctl -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || :; rm -rf "$private"
        echo "$me: initialisation failed; $PGDATA is left half made: remove it (docker compose down -v) before the next start" >&2' ERR

  args=(--username="$user" --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host="$method")
  if [ -n "${POSTGRES_PASSWORD:-}" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > "$private/pwfile"
    args+=(--pwfile="$private/pwfile")
  fi
  initdb "${args[@]}" -D "$PGDATA" >&2
  rm -f "$private/pwfile"
  printf '\n# Any address, any user, any database, by password (the entrypoint, as the official image)\nhost all all all %s\n' \
    "$method" >> "$PGDATA/pg_hba.conf"

  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories='$private'" start >&2
  export PGHOST=$private PGUSER=$user  # for the *.sh files' psql too
  psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password)
  if [ "$database" != postgres ]; then
    "${psql[@]}" --dbname postgres --set database="$database" >&2 <<<'CREATE DATABASE :"database";'
  fi
  for file in /docker-entrypoint-initdb.d/*; do
    case "$file" in
      *.sql) echo "$me: running $file" >&2; "${psql[@]}" --dbname "$database" -f "$file" >&2 ;;
      *.sh)
        if [ -x "$file" ]; then
          echo "$me: running $file" >&2; "$file" >&2
        else
          echo "$me: sourcing $file" >&2; . "$file" >&2
        fi ;;
      *) echo "$me: ignoring $file" >&2 ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >&2
  unset PGHOST PGUSER
  trap - ERR
  rm -rf "$private"
  echo "$me: initialised $PGDATA (superuser $user, database $database); starting the server" >&2
fi

# listen_addresses on the command line, not in postgresql.conf: a data directory initialised by
# the official image or by this one listens on TCP alike.  Arguments given later win.
exec postgres -c listen_addresses='*' "${@:2}"
