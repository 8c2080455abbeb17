# shellcheck shell=bash
# Functions to start and stop a throwaway PostgreSQL cluster from the installed binaries.
# Source this file, then call pg_throwaway_start (exports DATABASE_URL, PG_THROWAWAY_DIR) and
# pg_throwaway_stop. As root, the cluster runs as the `postgres` user (initdb refuses root).

pg_throwaway_bindir() {
  local dir
  if command -v pg_config >/dev/null 2>&1 && [[ -x "$(pg_config --bindir)/initdb" ]]; then
    pg_config --bindir
    return
  fi
  for dir in /usr/lib/postgresql/*/bin /usr/local/pgsql/bin; do
    if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
      echo "$dir"
      return
    fi
  done
  dir=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
  if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
    echo "$dir"
    return
  fi
  return 1
}

pg_throwaway_as_owner() {
  if [[ $EUID -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_throwaway_start() {
  local bindir port
  if ! bindir=$(pg_throwaway_bindir); then
    echo "pg-throwaway: no PostgreSQL server binaries (initdb, pg_ctl) found." >&2
    echo "  Install them (Debian: apt-get install postgresql) or set DATABASE_URL to a server" >&2
    echo "  where the user may CREATE DATABASE." >&2
    return 1
  fi
  if [[ $EUID -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    echo "pg-throwaway: running as root needs a 'postgres' user to own the cluster." >&2
    return 1
  fi
  PG_THROWAWAY_DIR=$(mktemp -d /tmp/carmy-pg.XXXXXX)
  export PG_THROWAWAY_DIR
  [[ $EUID -eq 0 ]] && chown postgres "$PG_THROWAWAY_DIR"
  port=${PG_THROWAWAY_PORT:-55432}
  while pg_isready -q -h 127.0.0.1 -p "$port" 2>/dev/null; do port=$((port + 1)); done
  pg_throwaway_as_owner "$bindir/initdb" -D "$PG_THROWAWAY_DIR/data" -U postgres -A trust \
    --no-sync >"$PG_THROWAWAY_DIR/initdb.log" 2>&1
  pg_throwaway_as_owner "$bindir/pg_ctl" -D "$PG_THROWAWAY_DIR/data" -w -l "$PG_THROWAWAY_DIR/server.log" \
    -o "-p $port -k $PG_THROWAWAY_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" \
    start >/dev/null
  export PG_THROWAWAY_BINDIR="$bindir"
  export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
  echo "pg-throwaway: started a throwaway cluster on 127.0.0.1:$port ($PG_THROWAWAY_DIR)"
}

pg_throwaway_stop() {
  if [[ -n "${PG_THROWAWAY_DIR:-}" && -d "$PG_THROWAWAY_DIR/data" ]]; then
    pg_throwaway_as_owner "$PG_THROWAWAY_BINDIR/pg_ctl" -D "$PG_THROWAWAY_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_THROWAWAY_DIR"
    echo "pg-throwaway: stopped and removed $PG_THROWAWAY_DIR"
  fi
}
