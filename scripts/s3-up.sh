#!/bin/bash
# Throwaway single-node Ceph RADOS Gateway (a real S3-compatible server) on 127.0.0.1, in memory
# (memstore), for tests. Needs the Debian packages ceph-mon ceph-osd radosgw
# (scripts/ci-install-s3.sh installs them).
#
#   scripts/s3-up.sh [up]     start (idempotent: an instance already up in $S3_DIR is reused)
#   scripts/s3-up.sh down     stop the daemons of $S3_DIR and remove it
#   scripts/s3-up.sh status   exit 0 and print the env lines if up
#
# Environment:
#   S3_DIR         state dir (default ${TMPDIR:-/tmp}/gantry-rgw-$UID)
#   S3_PORT        RGW port; S3_MON_PORT / S3_MON_V1_PORT monitor ports (default: free ports)
#   S3_ACCESS_KEY / S3_SECRET_KEY   credentials of the created user (GANTRYAK / GANTRYSK)
#   S3_MEMSTORE_BYTES  OSD memory budget (default 1 GiB)
#   S3_OWNER_PID   if set, a watchdog stops the instance when that process exits
# On success, stdout ends with KEY=VALUE lines: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY,
# S3_REGION, S3_DIR. Progress goes to stderr.
set -euo pipefail

CMD=${1:-up}
D=${S3_DIR:-${TMPDIR:-/tmp}/gantry-rgw-$(id -u)}
AK=${S3_ACCESS_KEY:-GANTRYAK}
SK=${S3_SECRET_KEY:-GANTRYSK}
SELF=$(readlink -f "$0")

log() { echo "[s3-up] $*" >&2; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    if ! port_busy "$p"; then echo "$p"; return 0; fi
  done
  log "no free port found"; return 1
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

print_env() {
  # shellcheck disable=SC1091
  cat "$D/env"
}

is_up() {
  [ -f "$D/env" ] && alive "$D/run/client.rgw.gantry.pid" || return 1
  local ep
  ep=$(sed -n 's/^S3_ENDPOINT=//p' "$D/env")
  curl -sf -o /dev/null --max-time 3 "$ep/"
}

stop_all() {
  [ -d "$D" ] || return 0
  local pf pid
  for pf in "$D"/run/*.pid "$D"/watchdog.pid; do
    [ -f "$pf" ] || continue
    pid=$(cat "$pf" 2>/dev/null || true)
    [ -n "$pid" ] && [ "$pid" != "$$" ] && [ "$pid" != "${WATCHDOG_SELF:-}" ] && kill -TERM "$pid" 2>/dev/null || true
  done
  for _ in $(seq 1 10); do
    local any=0
    for pf in "$D"/run/*.pid; do
      [ -f "$pf" ] || continue
      alive "$pf" && any=1
    done
    [ $any = 0 ] && break
    sleep 0.2
  done
  for pf in "$D"/run/*.pid; do
    [ -f "$pf" ] || continue
    alive "$pf" && kill -KILL "$(cat "$pf" 2>/dev/null)" 2>/dev/null || true
  done
  # only remove directories this script created
  if [ -f "$D/.gantry-rgw" ]; then rm -rf "$D"; fi
}

case "$CMD" in
  status)
    if is_up; then print_env; exit 0; fi
    exit 1
    ;;
  down)
    stop_all
    log "stopped ($D)"
    exit 0
    ;;
  up) ;;
  *) echo "usage: $0 [up|down|status]" >&2; exit 2 ;;
esac

for b in monmaptool ceph-mon ceph-osd ceph radosgw radosgw-admin curl; do
  command -v "$b" >/dev/null || { log "missing $b (run scripts/ci-install-s3.sh)"; exit 3; }
done

if is_up; then
  log "already up in $D"
  print_env
  exit 0
fi
# a half-started or dead instance: clear it
if [ -e "$D" ]; then
  if [ ! -f "$D/.gantry-rgw" ] && [ -n "$(ls -A "$D" 2>/dev/null)" ]; then
    log "$D exists and was not created by this script; refusing to use it"; exit 4
  fi
  touch "$D/.gantry-rgw"
  stop_all
fi

RGW_PORT=${S3_PORT:-}
[ -z "$RGW_PORT" ] || [ "$RGW_PORT" = 0 ] && RGW_PORT=$(free_port)
MON_PORT=${S3_MON_PORT:-}
[ -z "$MON_PORT" ] || [ "$MON_PORT" = 0 ] && MON_PORT=$(free_port)
MON1_PORT=${S3_MON_V1_PORT:-}
[ -z "$MON1_PORT" ] || [ "$MON1_PORT" = 0 ] && MON1_PORT=$(free_port)

mkdir -p "$D"/{mon,osd0,run,log,rgw}
touch "$D/.gantry-rgw"
log "radosgw state in $D (rgw :$RGW_PORT, mon :$MON_PORT/:$MON1_PORT)"
FSID=$(cat /proc/sys/kernel/random/uuid)
MONADDR="[v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON1_PORT]"
cat > "$D/ceph.conf" <<CONF
[global]
fsid = $FSID
mon host = $MONADDR
public network = 127.0.0.0/8
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
ms mon client mode = crc
ms client mode = crc
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd pool default pg num = 8
osd pool default pgp num = 8
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
osd crush chooseleaf type = 0
run dir = $D/run
log file = $D/log/\$name.log
admin socket = $D/run/\$name.asok
pid file = $D/run/\$name.pid
mon data = $D/mon
osd data = $D/osd0
osd objectstore = memstore
memstore device bytes = ${S3_MEMSTORE_BYTES:-1073741824}
osd class load list = *
osd class default list = *
[client.rgw.gantry]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw data = $D/rgw
rgw dns name = 127.0.0.1
CONF

fail() { log "$1; logs in $D/log"; tail -n 20 "$D"/log/*.log >&2 2>/dev/null || true; stop_all; exit 1; }

C=(-c "$D/ceph.conf")
T0=$(date +%s%N)
monmaptool --create --fsid "$FSID" --addv a "$MONADDR" "$D/monmap" >/dev/null
ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" >>"$D/log/setup.log" 2>&1 || fail "ceph-mon --mkfs failed"
ceph-mon "${C[@]}" -i a >>"$D/log/setup.log" 2>&1 || fail "ceph-mon failed to start"

# the watchdog: stop everything when the owner process goes away (even on SIGKILL)
if [ -n "${S3_OWNER_PID:-}" ]; then
  S3_DIR="$D" OWNER="$S3_OWNER_PID" setsid bash -c '
    echo $$ > "$S3_DIR/watchdog.pid"
    while kill -0 "$OWNER" 2>/dev/null; do sleep 1; done
    WATCHDOG_SELF=$$ S3_DIR="$S3_DIR" "'"$SELF"'" down
  ' </dev/null >/dev/null 2>&1 &
fi

log "mon up after $(( ($(date +%s%N) - T0) / 1000000 )) ms"
ID=$(timeout 60 ceph "${C[@]}" osd create 2>>"$D/log/setup.log") || fail "ceph osd create failed"
ceph-osd "${C[@]}" -i "$ID" --mkfs >>"$D/log/setup.log" 2>&1 || fail "ceph-osd --mkfs failed"
ceph-osd "${C[@]}" -i "$ID" >>"$D/log/setup.log" 2>&1 || fail "ceph-osd failed to start"
up=0
for _ in $(seq 1 60); do
  if timeout 10 ceph "${C[@]}" osd stat 2>/dev/null | grep -q "1 up"; then up=1; break; fi
  sleep 0.5
done
[ $up = 1 ] || fail "osd did not come up"
log "osd up after $(( ($(date +%s%N) - T0) / 1000000 )) ms"
radosgw "${C[@]}" -n client.rgw.gantry >>"$D/log/setup.log" 2>&1 || fail "radosgw failed to start"
up=0
for _ in $(seq 1 240); do
  if curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$RGW_PORT/"; then up=1; break; fi
  sleep 0.25
done
[ $up = 1 ] || fail "radosgw did not answer"
radosgw-admin "${C[@]}" user create --uid=gantry --display-name=gantry --access-key="$AK" --secret="$SK" >/dev/null 2>>"$D/log/setup.log" ||
  radosgw-admin "${C[@]}" user info --uid=gantry >/dev/null 2>&1 || fail "radosgw-admin user create failed"
T1=$(date +%s%N)
cat > "$D/env" <<ENV
S3_ENDPOINT=http://127.0.0.1:$RGW_PORT
S3_ACCESS_KEY=$AK
S3_SECRET_KEY=$SK
S3_REGION=us-east-1
S3_DIR=$D
ENV
log "radosgw up in $(( (T1 - T0) / 1000000 )) ms"
print_env
