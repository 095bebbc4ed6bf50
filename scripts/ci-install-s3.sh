#!/bin/bash
# Installs the Ceph RADOS Gateway binaries (Debian 12: ceph-mon ceph-osd radosgw, ~20 s) that
# scripts/s3-up.sh and test/helpers/s3.ts use to run the S3 driver's tests against a real
# S3-compatible server. Idempotent; needs root (or sudo).
set -euo pipefail
if command -v radosgw >/dev/null && command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null; then
  echo "ceph radosgw already installed: $(ceph --version 2>/dev/null || true)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw curl ||
  { $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw curl; }
ceph --version
