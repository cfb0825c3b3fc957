#!/usr/bin/env bash
# The PostgreSQL image the test suite asks testcontainers for (TEST_DATABASE=container, issue 16),
# built here because no image registry is reachable from these machines: the official
# `postgres:15-bookworm` cannot be pulled, so this script builds a stand-in under that tag from
# Debian's own packages (debootstrap minbase bookworm + postgresql-15, the same major version as
# the CI server), with an entrypoint that honours what the official image's does for a test:
# POSTGRES_USER (default postgres), POSTGRES_PASSWORD (required unless
# POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_DB (default the user), PGDATA; and that logs
# "database system is ready to accept connections" twice, once for the initialisation server and
# once for the real one, which is what testcontainers' PostgreSQL readiness wait counts.
# On a machine that can pull, the official image is used as it is and this script is not needed.
#
# Prints "PASS …"/"FAIL …" lines (counted by .ci/run) and exits 1 on failure. Caches as
# .ci/container.sh does: the image itself, then its root file system as a tarball under
# /var/cache/messaging-service-ci, then debootstrap.
set -uo pipefail
cd "$(dirname "$0")/.."
. .ci/lib.sh

PG_MAJOR=15
STANDIN_REVISION=1 # bump when the recipe below changes: it names the tarball cache
IMAGE=${TEST_POSTGRES_IMAGE:-postgres:${PG_MAJOR}-${SUITE}}
TARBALL="${CACHE_DIR}/postgres-standin-${PG_MAJOR}-${SUITE}-r${STANDIN_REVISION}.tar"
LABEL="messaging-service-ci.standin=postgres-${PG_MAJOR}-${SUITE}-r${STANDIN_REVISION}"

start_docker_engine || exit 1

build_rootfs() { # writes $TARBALL
  local work rootfs
  work=$(mktemp -d /var/tmp/postgres-standin.XXXXXX)
  rootfs="$work/rootfs"
  debootstrap_minbase "$rootfs" "postgresql-${PG_MAJOR}" "$work/debootstrap.log" || { rm -rf "$work"; return 1; }
  # The package's own cluster (postgresql-common creates one on install) is not the image's.
  rm -rf "$rootfs/var/lib/postgresql/${PG_MAJOR}" "$rootfs/etc/postgresql/${PG_MAJOR}"
  mkdir -p "$rootfs/var/lib/postgresql/data" "$rootfs/var/run/postgresql"
  chroot "$rootfs" chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
  cat >"$rootfs/usr/local/bin/docker-entrypoint.sh" <<ENTRY
#!/bin/sh
set -eu
PATH=/usr/lib/postgresql/${PG_MAJOR}/bin:\$PATH
export PGDATA=\${PGDATA:-/var/lib/postgresql/data}
POSTGRES_USER=\${POSTGRES_USER:-postgres}
POSTGRES_DB=\${POSTGRES_DB:-\$POSTGRES_USER}
if [ "\$(id -u)" = 0 ]; then
  mkdir -p "\$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "\$PGDATA" /var/run/postgresql
  chmod 0700 "\$PGDATA"
  exec runuser -u postgres -- "\$0" "\$@"
fi
if [ ! -s "\$PGDATA/PG_VERSION" ]; then
  auth=\${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
  if [ -z "\${POSTGRES_PASSWORD:-}" ] && [ "\$auth" != trust ]; then
    echo 'Error: POSTGRES_PASSWORD is not set (or set POSTGRES_HOST_AUTH_METHOD=trust)' >&2
    exit 1
  fi
  pwfile=\$(mktemp)
  printf '%s\n' "\${POSTGRES_PASSWORD:-}" >"\$pwfile"
  initdb --username="\$POSTGRES_USER" --pwfile="\$pwfile" --auth-local=trust --auth-host="\$auth" --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "\$pwfile"
  printf 'host all all all %s\n' "\$auth" >>"\$PGDATA/pg_hba.conf"
  pg_ctl -D "\$PGDATA" -o "-c listen_addresses=''" -w start
  if [ "\$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 --username "\$POSTGRES_USER" --dbname postgres -c "CREATE DATABASE \\"\$POSTGRES_DB\\"" >/dev/null
  fi
  pg_ctl -D "\$PGDATA" -m fast -w stop
fi
exec postgres -c listen_addresses='*' "\$@"
ENTRY
  chmod 0755 "$rootfs/usr/local/bin/docker-entrypoint.sh"
  trim_rootfs "$rootfs"
  save_rootfs "$rootfs" "$TARBALL"
  local status=$?
  rm -rf "$work"
  return $status
}

t0=$(date +%s)
from=cached-image
if [ "$(docker image inspect -f "{{index .Config.Labels \"messaging-service-ci.standin\"}}" "$IMAGE" 2>/dev/null)" != "${LABEL#*=}" ]; then
  from=cached-tarball
  if [ ! -s "$TARBALL" ]; then from=debootstrap; build_rootfs; fi
  if [ -s "$TARBALL" ]; then
    log "docker import ${TARBALL} as ${IMAGE}"
    timeout 300 docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV PGDATA=/var/lib/postgresql/data' \
      --change "LABEL ${LABEL}" \
      --change 'EXPOSE 5432' \
      --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
      "$TARBALL" "$IMAGE" >/dev/null
  fi
fi
if [ "$(docker image inspect -f "{{index .Config.Labels \"messaging-service-ci.standin\"}}" "$IMAGE" 2>/dev/null)" != "${LABEL#*=}" ]; then
  echo "FAIL PostgreSQL stand-in image ${IMAGE}: could not be built"
  exit 1
fi

# It starts as testcontainers starts it: user, password and database from the environment, and
# the second "ready" line means a server that takes connections on its port.
name="postgres-standin-check-$$"
docker run -d --name "$name" -e POSTGRES_USER=ci -e POSTGRES_PASSWORD=ci-secret -e POSTGRES_DB=ci_db -p 127.0.0.1::5432 "$IMAGE" >/dev/null
ready=0
for _ in $(seq 1 120); do
  [ "$(docker logs "$name" 2>&1 | grep -c 'database system is ready to accept connections')" -ge 2 ] && { ready=1; break; }
  sleep 0.5
done
port=$(docker port "$name" 5432/tcp 2>/dev/null | head -n 1 | sed 's/.*://')
answer=$(PGPASSWORD=ci-secret timeout 10 psql -tA -h 127.0.0.1 -p "${port:-1}" -U ci -d ci_db -c 'select current_user || $$@$$ || current_database()' 2>&1)
docker rm -f "$name" >/dev/null 2>&1
if [ "$ready" = 1 ] && [ "$answer" = "ci@ci_db" ]; then
  echo "PASS PostgreSQL stand-in image ${IMAGE} (${from}, $(elapsed "$t0")): POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB honoured"
else
  echo "FAIL PostgreSQL stand-in image ${IMAGE}: ready=${ready}, psql said: ${answer}"
  exit 1
fi
