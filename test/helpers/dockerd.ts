/**
 * The run's throwaway Docker daemon (scripts/test-dockerd.mjs, started by scripts/run-tests.mjs for
 * test files that name GANTRY_TEST_DOCKER_HOST): its socket, the busybox test image, a dockerode
 * client, and the daemon's own list of a service's containers (by the gantry labels). `skip` is
 * the reason to skip (naming dockerd) when there is none.
 */
import { spawnSync } from 'node:child_process';
import Dockerode from 'dockerode';

const host = process.env.GANTRY_TEST_DOCKER_HOST ?? '';
export const dockerSocket = host.startsWith('unix://') ? host.slice('unix://'.length) : '';
/** busybox httpd on 8080: GET /health, GET /cgi-bin/env (its environment), POST /cgi-bin/invoke; CRASH=x exits 3 at start. */
export const busyboxImage = process.env.GANTRY_TEST_DOCKER_IMAGE ?? 'gantry-test/busybox-httpd:1';
export const dockerSkip: string | false = dockerSocket
  ? false
  : `dockerd: no test Docker daemon (${process.env.GANTRY_TEST_DOCKER_UNAVAILABLE ?? 'run through scripts/run-tests.mjs, which starts one, or set GANTRY_TEST_DOCKER_HOST=unix:///path'})`;

export const docker = (): Dockerode => new Dockerode({ socketPath: dockerSocket });

/** The daemon's containers (running or not) carrying label=value. */
export async function containersByLabel(d: Dockerode, label: string, value: string): Promise<Dockerode.ContainerInfo[]> {
  return d.listContainers({ all: true, filters: { label: [`${label}=${value}`] } });
}

/**
 * A Node 20 base image made on this host, with no registry: a rootfs holding the host's node
 * binary and the shared libraries ldd lists, the host's npm, the static busybox and its applets
 * (sh, mkdir, chown, env, test...), the host's CA bundle (NODE_EXTRA_CA_CERTS), and groupadd /
 * useradd shims for the subset of flags the Dockerfile uses; imported with `docker import`.
 * Returns an error message when it cannot be made.
 */
export function importNodeBase(tag: string): string | null {
  const script = String.raw`
set -eu
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
NODE="$1"; BUSYBOX="$2"; TAG="$3"
NPM=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
mkdir -p "$R/usr/local/bin" "$R/usr/local/lib/node_modules" "$R/bin" "$R/usr/bin" "$R/usr/sbin" "$R/sbin" "$R/etc/ssl/certs" "$R/tmp" "$R/root" "$R/var/lib"
cp "$NODE" "$R/usr/local/bin/node"
# node's libraries, and (as on Debian's node:20-slim) the whole C and C++ runtime: native addons
# such as vite's rolldown binding need more of glibc than node does (librt)
LIBS=$(ldd "$NODE" | awk '/=>/ { print $3 } /^[[:space:]]*\// { print $1 }')
if command -v dpkg >/dev/null; then LIBS="$LIBS $(dpkg -L libc6 libgcc-s1 libstdc++6 2>/dev/null | grep -E '/lib[^/]*\.so(\.[0-9]+)*$' || true)"; fi
for lib in $LIBS; do
  [ -e "$lib" ] || continue
  mkdir -p "$R$(dirname "$lib")"; cp -L "$lib" "$R$lib"
done
cp -a "$NPM" "$R/usr/local/lib/node_modules/npm"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$R/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$R/usr/local/bin/npx"
cp "$BUSYBOX" "$R/bin/busybox"
for a in $("$BUSYBOX" --list-full); do [ -e "$R/$a" ] || [ -L "$R/$a" ] || ln -s /bin/busybox "$R/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$R/etc/passwd"
printf 'root:x:0:\n' > "$R/etc/group"
cat > "$R/usr/sbin/groupadd" <<'SH'
#!/bin/sh
# test base: groupadd [--system] --gid N NAME
gid=
while [ $# -gt 1 ]; do case "$1" in --gid|-g) gid=$2; shift 2 ;; *) shift ;; esac; done
echo "$1:x:$gid:" >> /etc/group
SH
cat > "$R/usr/sbin/useradd" <<'SH'
#!/bin/sh
# test base: useradd [--system] --uid N --gid GROUP --home-dir DIR --shell SH NAME
uid=; gid=; home=/; sh=/bin/sh
while [ $# -gt 1 ]; do case "$1" in --uid|-u) uid=$2; shift 2 ;; --gid|-g) gid=$2; shift 2 ;; --home-dir|-d) home=$2; shift 2 ;; --shell|-s) sh=$2; shift 2 ;; *) shift ;; esac; done
num=$(grep "^$gid:" /etc/group | cut -d: -f3); [ -n "$num" ] || num=$gid
echo "$1:x:$uid:$num::$home:$sh" >> /etc/passwd
SH
chmod 755 "$R/usr/sbin/groupadd" "$R/usr/sbin/useradd"
chmod 1777 "$R/tmp"
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/"
tar -C "$R" -c . | docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt' -c 'CMD ["node"]' - "$TAG" >/dev/null
`;
  const r = spawnSync('bash', ['-c', script, 'node-base', process.execPath, process.env.GANTRY_TEST_DOCKER_BUSYBOX ?? '/bin/busybox', tag], { env: { ...process.env, DOCKER_HOST: host }, encoding: 'utf8', timeout: 120_000 });
  return r.status === 0 ? null : `making the node base image failed (${r.status ?? r.signal}): ${(r.stderr ?? '').trim().slice(-2000)}`;
}
