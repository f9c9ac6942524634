#!/usr/bin/env bash
# Runs once, when the postgres container initializes an empty data directory
# (/docker-entrypoint-initdb.d). Creates the two roles of docs/database.md, as the
# local stack does (scripts/stack/postgres.sh): switchboard_owner owns the database and
# runs migrations; switchboard_app is what the services use (NOBYPASSRLS, not the owner,
# so row-level security applies to it). Passwords come from the compose environment.
set -euo pipefail

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v owner_pw="$SWITCHBOARD_PG_OWNER_PASSWORD" -v app_pw="$SWITCHBOARD_PG_APP_PASSWORD" <<'SQL'
CREATE ROLE switchboard_owner LOGIN CREATEDB PASSWORD :'owner_pw';
CREATE ROLE switchboard_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE PASSWORD :'app_pw';
ALTER DATABASE switchboard OWNER TO switchboard_owner;
GRANT ALL ON SCHEMA public TO switchboard_owner;
GRANT USAGE ON SCHEMA public TO switchboard_app;
SQL
