#!/usr/bin/env bash
# Makes sure the PostgreSQL store tests find a server (tests/store/pgdb.rs says where they look):
# DEVSHARD_TEST_DATABASE_URL when set; else the local server at 127.0.0.1:5432 (database `test`,
# trust auth), started here when installed but down; else initdb/pg_ctl for the tests' throwaway
# cluster, installed here (Debian's `postgresql`) when missing.
set -euo pipefail

if [ -n "${DEVSHARD_TEST_DATABASE_URL:-}" ]; then
  echo "postgres: DEVSHARD_TEST_DATABASE_URL is set"
  exit 0
fi

answering() {
  command -v psql >/dev/null 2>&1 || return 1
  local user
  for user in postgres root; do
    if psql -h 127.0.0.1 -U "$user" -d test -tAc 'select 1' >/dev/null 2>&1; then
      return 0
    fi
  done
  return 1
}

if answering; then
  echo "postgres: the local server answers"
  exit 0
fi
if [ -d /etc/postgresql ] && command -v pg_ctlcluster >/dev/null 2>&1; then
  for version in $(ls /etc/postgresql); do
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  done
  for _ in $(seq 1 30); do
    if answering; then
      echo "postgres: the local server was started"
      exit 0
    fi
    sleep 1
  done
fi
if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "postgres: no local server; the tests start a throwaway cluster with initdb/pg_ctl"
  exit 0
fi
echo "postgres: installing the postgresql package (initdb/pg_ctl for the tests)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
