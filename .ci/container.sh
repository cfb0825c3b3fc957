#!/usr/bin/env bash
# The container, proven (SPEC §10, issue 14): builds the image and runs it against the local
# PostgreSQL, then prints one "PASS <check>" or "FAIL <check>" line per check and a last line
# "container: N passed, N failed". Exits 1 when any check failed. `.ci/run` calls it and counts
# the PASS/FAIL lines; it also runs on its own: `bash .ci/container.sh`.
#
# No image registry is reachable from these machines, so the official base image (oven/bun) cannot
# be pulled. The Dockerfile takes its base as the build argument BUN_IMAGE; this script builds a
# local stand-in from Debian (debootstrap, minbase) plus the Bun binary of the npm package
# @oven/bun-linux-x64-baseline (the build the official image uses on amd64), laid out like the
# official Debian image (oven-sh/bun dockerhub/debian/Dockerfile: user bun, uid 1000; bun and bunx
# in /usr/local/bin; its environment, entrypoint and working directory), and builds with
# --build-arg BUN_IMAGE=<that tag>.
#
# Caches, fastest first: the stand-in image itself (it stays in /var/lib/docker), then its root
# file system as a tarball under /var/cache/messaging-service-ci, then debootstrap from the mirror
# apt is configured with. Every step is bounded by `timeout`.
set -uo pipefail
cd "$(dirname "$0")/.."
. .ci/lib.sh

BUN_VERSION=${BUN_VERSION:-1.4.5}
BUN_PACKAGE=@oven/bun-linux-x64-baseline
STANDIN_REVISION=2 # bump when the recipe below changes: it names both caches
BASE_TAG="messaging-service-ci/bun-standin:${BUN_VERSION}-${SUITE}-r${STANDIN_REVISION}"
IMAGE_TAG=messaging-service:ci
BASE_TARBALL="${CACHE_DIR}/bun-standin-${BUN_VERSION}-${SUITE}-r${STANDIN_REVISION}.tar"
PG_HOST=127.0.0.1
PG_PORT=5432
PUBLIC_URL_UNDER_TEST=https://messaging.ci.example
NAME="messaging-ci-$$"
DB="messaging_ci_container_$$"

passed=0
failed=0
check() { # check <name> <0|1> [detail]
  if [ "$2" -eq 0 ]; then echo "PASS $1"; passed=$((passed + 1)); else echo "FAIL $1${3:+: $3}"; failed=$((failed + 1)); fi
}
finish() {
  echo "container: ${passed} passed, ${failed} failed"
  [ "$failed" -eq 0 ]
  exit $?
}

cleanup() {
  docker rm -f "$NAME" "$NAME-busy" >/dev/null 2>&1 || true
  # The images earlier runs built under the same tag (untagged now); the build cache stays.
  timeout 60 docker image prune -f >/dev/null 2>&1 || true
  psql -q -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -c "DROP DATABASE IF EXISTS ${DB} WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# --- 1. The Docker engine -------------------------------------------------------------------
t0=$(date +%s)
start_docker_engine || { failed=$((failed + 1)); finish; }
check "docker engine running ($(docker version -f '{{.Server.Version}}' 2>/dev/null), $(elapsed "$t0"))" 0

# --- 2. The stand-in base image ---------------------------------------------------------------
t0=$(date +%s)
build_base_rootfs() { # writes $BASE_TARBALL
  local work rootfs
  work=$(mktemp -d /var/tmp/bun-standin.XXXXXX)
  rootfs="$work/rootfs"
  debootstrap_minbase "$rootfs" "" "$work/debootstrap.log" || { rm -rf "$work"; return 1; }
  log "Bun ${BUN_VERSION} from the npm package ${BUN_PACKAGE}"
  local tgz
  tgz=$(cd "$work" && timeout 300 npm pack "${BUN_PACKAGE}@${BUN_VERSION}" --silent 2>/dev/null | tail -n 1) \
    && tar -xzf "$work/$tgz" -C "$work" package/bin/bun \
    || { rm -rf "$work"; return 1; }
  install -m 0755 "$work/package/bin/bun" "$rootfs/usr/local/bin/bun"
  ln -s bun "$rootfs/usr/local/bin/bunx"
  # As the official Debian image: user and group bun (1000), home /home/bun, app dir /home/bun/app.
  chroot "$rootfs" groupadd --gid 1000 bun
  chroot "$rootfs" useradd --uid 1000 --gid bun --shell /bin/sh --create-home bun
  mkdir -p "$rootfs/home/bun/app" && chroot "$rootfs" chown bun:bun /home/bun/app
  cat >"$rootfs/usr/local/bin/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
set -e
# As the official image's entrypoint: a first argument that is an option is an option of bun.
if [ "${1#-}" != "${1}" ] || [ -z "$(command -v "${1}")" ]; then set -- bun "$@"; fi
exec "$@"
EOF
  chmod 0755 "$rootfs/usr/local/bin/docker-entrypoint.sh"
  trim_rootfs "$rootfs"
  "$rootfs/usr/local/bin/bun" --version >/dev/null || { rm -rf "$work"; return 1; }
  save_rootfs "$rootfs" "$BASE_TARBALL"
  local status=$?
  rm -rf "$work"
  return $status
}
base_from=cached-image
if ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
  base_from=cached-tarball
  if [ ! -s "$BASE_TARBALL" ]; then base_from=debootstrap; build_base_rootfs; fi
  if [ -s "$BASE_TARBALL" ]; then
    log "docker import ${BASE_TARBALL} as ${BASE_TAG}"
    timeout 300 docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV BUN_RUNTIME_TRANSPILER_CACHE_PATH=0' \
      --change 'ENV BUN_INSTALL_BIN=/usr/local/bin' \
      --change 'WORKDIR /home/bun/app' \
      --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
      --change 'CMD ["/usr/local/bin/bun"]' \
      "$BASE_TARBALL" "$BASE_TAG" >/dev/null
  fi
fi
if ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
  check "stand-in base image ${BASE_TAG}" 1 "could not be built"
  finish
fi
check "stand-in base image ${BASE_TAG} (${base_from}, $(elapsed "$t0"))" 0

# This machine reaches the npm registry through an egress proxy whose CA is in the host's trust
# store (NODE_EXTRA_CA_CERTS); `bun install` inside the build must trust it too. The CA is the
# machine's, not the cached base's: it goes in a thin layer built on each run.
BUILD_BASE=$BASE_TAG
host_ca=${NODE_EXTRA_CA_CERTS:-}
if [ -n "$host_ca" ] && [ -s "$host_ca" ]; then
  ca_ctx=$(mktemp -d)
  cp "$host_ca" "$ca_ctx/host-ca.crt"
  printf 'FROM %s\nCOPY host-ca.crt /usr/local/share/host-ca.crt\nENV NODE_EXTRA_CA_CERTS=/usr/local/share/host-ca.crt\n' "$BASE_TAG" >"$ca_ctx/Dockerfile"
  if DOCKER_BUILDKIT=0 timeout 120 docker build -q -t "${BASE_TAG}-hostca" "$ca_ctx" >/dev/null 2>&1; then BUILD_BASE="${BASE_TAG}-hostca"; fi
  rm -rf "$ca_ctx"
fi

# --- 3. The image ---------------------------------------------------------------------------
t0=$(date +%s)
log "docker build --build-arg BUN_IMAGE=${BUILD_BASE} -t ${IMAGE_TAG} ."
# --network host: `bun install` inside the build reaches the npm registry the way the host does.
build_log=$(mktemp)
if DOCKER_BUILDKIT=0 timeout 600 docker build --force-rm --network host --build-arg "BUN_IMAGE=${BUILD_BASE}" -t "$IMAGE_TAG" . >"$build_log" 2>&1; then
  check "image builds ($(elapsed "$t0"))" 0
else
  tail -n 20 "$build_log"
  check "image builds" 1
  finish
fi
rm -f "$build_log"

# --- 4. Run it against a fresh database on the local PostgreSQL -----------------------------
psql -q -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -c "CREATE DATABASE ${DB}" >/dev/null \
  || { check "fresh database ${DB}" 1; finish; }
# A free port on loopback: the container shares the host's network (--network host).
PORT=$(bun -e 'const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } }); console.log(s.port); s.stop(true)')
KEY=$(head -c 32 /dev/urandom | base64)
t0=$(date +%s)
docker run -d --name "$NAME" --network host \
  --health-interval 1s --health-start-period 30s \
  -e PORT="$PORT" -e PUBLIC_URL="$PUBLIC_URL_UNDER_TEST" -e ENCRYPTION_KEY="$KEY" \
  -e DATABASE_URL="postgres://postgres@${PG_HOST}:${PG_PORT}/${DB}" \
  "$IMAGE_TAG" >/dev/null || { check "container starts" 1; finish; }

health=starting
for _ in $(seq 1 120); do
  health=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$NAME" 2>/dev/null || echo gone)
  [ "$health" = healthy ] || [ "$health" = unhealthy ] || [ "$health" = gone ] && break
  [ "$(docker inspect -f '{{.State.Running}}' "$NAME" 2>/dev/null)" = true ] || { health=exited; break; }
  sleep 0.5
done
check "healthcheck healthy ($(elapsed "$t0"))" "$([ "$health" = healthy ]; echo $?)" "$health; $(docker logs --tail 5 "$NAME" 2>&1 | tr '\n' ' ')"

code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:${PORT}/readyz")
check "GET /readyz 200" "$([ "$code" = 200 ]; echo $?)" "got $code"

issuer=$(curl -s --max-time 5 "http://127.0.0.1:${PORT}/v0/.well-known/oauth-authorization-server" \
  | bun -e 'console.log((await Bun.stdin.json().catch(() => ({}))).issuer ?? "")')
check "PUBLIC_URL honoured (issuer ${issuer:-none})" "$([ "$issuer" = "${PUBLIC_URL_UNDER_TEST}/v0" ]; echo $?)" "expected ${PUBLIC_URL_UNDER_TEST}/v0"

# The dashboard is bundled by Bun inside the container on its first request (Preact from node_modules).
dashboard_script=$(curl -s --max-time 10 "http://127.0.0.1:${PORT}/dashboard" | grep -oE 'src="[^"]*dashboard\.js[^"]*"' | sed 's/^src="//; s/"$//')
code=000
[ -n "$dashboard_script" ] && code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 "http://127.0.0.1:${PORT}${dashboard_script}")
check "GET /dashboard and its bundled script (${code})" "$([ "$code" = 200 ]; echo $?)" "script ${dashboard_script:-not found in the page}"

applied=$(psql -tA -h "$PG_HOST" -p "$PG_PORT" -U postgres -d "$DB" -c 'SELECT count(*) FROM drizzle.__drizzle_migrations' 2>/dev/null)
expected=$(ls drizzle/*.sql | wc -l)
check "migrations applied at start (${applied:-0}/${expected})" "$([ "${applied:-0}" = "$expected" ]; echo $?)"

uid=$(timeout 20 docker exec "$NAME" id -u 2>/dev/null)
check "runs as non-root (uid ${uid:-?})" "$([ -n "$uid" ] && [ "$uid" != 0 ]; echo $?)"

demo=$(timeout 60 docker exec "$NAME" bun run cli demo --json 2>&1)
# The JSON document (possibly pretty-printed, after the audit log lines) holds api_key.secret.
api_key=$(bun -e 'const t = await Bun.stdin.text(); const i = t.search(/^\{\s*$|^\{"account"/m); try { console.log(JSON.parse(t.slice(i)).api_key.secret) } catch { console.log("") }' <<<"$demo")
code=000
[ -n "$api_key" ] && code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:${PORT}/v0/account?key=${api_key}")
check "docker exec … bun run cli demo: its API key works (${code})" "$([ "$code" = 200 ]; echo $?)" "$(head -c 300 <<<"$demo")"

# The port in use: a second container on the same port stops with one line, no stack trace.
busy_out=$(timeout 60 docker run --name "$NAME-busy" --network host \
  -e PORT="$PORT" -e ENCRYPTION_KEY="$KEY" -e DATABASE_URL="postgres://postgres@${PG_HOST}:${PG_PORT}/${DB}" \
  "$IMAGE_TAG" 2>&1)
busy_status=$?
busy_errors=$(grep -v '"level":"\(info\|debug\|warn\)"' <<<"$busy_out" | grep -c .)
check "port in use: exits non-zero with one line (exit ${busy_status}, ${busy_errors} line(s))" \
  "$([ "$busy_status" -ne 0 ] && [ "$busy_status" -ne 124 ] && [ "$busy_errors" -eq 1 ]; echo $?)" "$(head -c 400 <<<"$busy_out" | tr '\n' ' ')"
docker rm -f "$NAME-busy" >/dev/null 2>&1

# Drain: a request in flight when SIGTERM arrives (its body half sent) still gets its answer.
# POST /v0/auth/token with a refresh token that does not exist: a 400, after the whole body.
t0=$(date +%s)
in_flight=$(timeout 60 python3 - "$PORT" "$NAME" <<'PY' 2>&1
import socket, subprocess, sys, time
port, name = int(sys.argv[1]), sys.argv[2]
body = b'grant_type=refresh_token&refresh_token=rt_not_a_real_token&client_id=nobody'
s = socket.create_connection(('127.0.0.1', port), timeout=20)
s.sendall(b'POST /v0/auth/token HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n'
          b'Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n' % len(body) + body[:10])
time.sleep(0.5)
stop = subprocess.Popen(['docker', 'stop', '-t', '20', name], stdout=subprocess.DEVNULL)
time.sleep(2)
s.sendall(body[10:])
try:
    print(s.recv(4096).split(b'\r\n', 1)[0].decode() or 'connection closed')
except OSError as e:
    print('error', e)
stop.wait(40)
PY
)
stop_s=$(( $(date +%s) - t0 ))
check "a request in flight at SIGTERM is answered (${in_flight})" "$(grep -qE '^HTTP/1\.1 [2-4][0-9][0-9]' <<<"$in_flight"; echo $?)"
timeout 30 docker stop -t 20 "$NAME" >/dev/null 2>&1
exit_code=$(docker inspect -f '{{.State.ExitCode}}' "$NAME" 2>/dev/null)
drained=$(docker logs "$NAME" 2>&1 | grep -c '"msg":"shutting down".*SIGTERM')
check "docker stop (SIGTERM): exit ${exit_code} within ${stop_s}s, drain line logged" \
  "$([ "$exit_code" = 0 ] && [ "$stop_s" -lt 12 ] && [ "$drained" -ge 1 ]; echo $?)" "$(docker logs --tail 3 "$NAME" 2>&1 | tr '\n' ' ')"

finish
