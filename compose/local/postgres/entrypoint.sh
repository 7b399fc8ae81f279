#!/usr/bin/env bash
# The part of the official postgres image's entrypoint that docker-compose.yml relies on: on the
# first start (no PG_VERSION in PGDATA) initdb with POSTGRES_USER and POSTGRES_PASSWORD, create
# POSTGRES_DB, run /docker-entrypoint-initdb.d/*.sql and *.sh in order on a server reachable
# through its socket only; then the server in the foreground on every interface, password
# logins (scram-sha-256) over TCP.  A volume already initialised starts as it is.
set -euo pipefail

if [ "$(id -u)" = 0 ]; then
  # A volume mounted over PGDATA may belong to root: hand it to postgres, then drop root.
  mkdir -p "$PGDATA" && chown -R postgres:postgres "$PGDATA" && chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ "${1:-postgres}" != postgres ]; then
  exec "$@"  # another command (psql, a shell): as is
fi

user=${POSTGRES_USER:-postgres}
database=${POSTGRES_DB:-$user}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != trust ]; then
    echo "postgres: POSTGRES_PASSWORD is empty; set it (or POSTGRES_HOST_AUTH_METHOD=trust for no password)" >&2
    exit 1
  fi
  password_file=$(mktemp)
  printf '%s' "${POSTGRES_PASSWORD:-}" > "$password_file"
  initdb --username="$user" --pwfile="$password_file" --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA" > /dev/null
  rm -f "$password_file"
  method=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
  echo "host all all all $method" >> "$PGDATA/pg_hba.conf"

  # Initialisation on the socket only: nothing connects over TCP before it is done.
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start > /dev/null
  psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$user" --dbname postgres)
  if [ "$database" != postgres ]; then
    "${psql[@]}" -q -c "CREATE DATABASE \"$database\"" > /dev/null
  fi
  for file in /docker-entrypoint-initdb.d/*; do
    case "$file" in
      *.sql) echo "postgres: running $file" >&2; "${psql[@]}" --dbname "$database" -q -f "$file" > /dev/null ;;
      *.sh) echo "postgres: running $file" >&2; . "$file" ;;
      *) ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
  echo "postgres: initialised $PGDATA (user $user, database $database)" >&2
fi

exec postgres -c listen_addresses='*' "${@:2}"
