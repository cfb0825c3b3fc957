# Shared by .ci/container.sh and .ci/postgres-image.sh (sourced, not run): the Docker engine, and
# root file systems built from Debian with debootstrap, since no image registry is reachable here.

SUITE=bookworm
CACHE_DIR=${CONTAINER_CACHE_DIR:-/var/cache/messaging-service-ci}

log() { printf '  [%s %s] %s\n' "$(basename "$0" .sh)" "$(date +%T)" "$*"; }
elapsed() { echo $(( $(date +%s) - $1 ))s; }

# Debian's docker.io and debootstrap, and dockerd started once and left running, as a service
# would be (overlay2 works on these machines). Prints a FAIL line and returns 1 when it cannot.
start_docker_engine() {
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    log "installing Debian's docker.io and debootstrap"
    { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq docker.io debootstrap; } >/dev/null 2>&1
  fi
  if ! timeout 10 docker info >/dev/null 2>&1; then
    log "starting dockerd (log: /var/log/dockerd-ci.log)"
    setsid nohup dockerd >/var/log/dockerd-ci.log 2>&1 < /dev/null &
    for _ in $(seq 1 60); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 0.5; done
  fi
  if ! timeout 10 docker info >/dev/null 2>&1; then
    echo "FAIL docker engine running: $(tail -n 3 /var/log/dockerd-ci.log 2>/dev/null | tr '\n' ' ')"
    return 1
  fi
}

# debootstrap_minbase <rootfs> <extra packages, comma-separated or empty> <log file>: Debian
# ${SUITE}, minbase, from the mirror apt is configured with.
debootstrap_minbase() {
  local rootfs=$1 include=$2 logfile=$3 mirror
  mirror=$(grep -hoE '^(URIs:|deb) +[^ ]*(https?://[^ ]+/debian)/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
    | grep -oE 'https?://[^ ]+/debian' | head -n 1)
  log "debootstrap --variant=minbase ${SUITE}${include:+ --include=${include}} (apt's mirror)"
  timeout 900 debootstrap --variant=minbase ${include:+--include="$include"} "$SUITE" "$rootfs" "${mirror:-http://deb.debian.org/debian}" >"$logfile" 2>&1 \
    || { tail -n 5 "$logfile"; return 1; }
}

# What an image does not need: downloaded packages, package lists, documentation.
trim_rootfs() {
  rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/usr/share/doc/* "$1"/usr/share/man/*
}

# save_rootfs <rootfs> <tarball>: the cache, written whole or not at all.
save_rootfs() {
  mkdir -p "$(dirname "$2")"
  tar -C "$1" --numeric-owner -cf "$2.part" . && mv "$2.part" "$2"
}
