// A throwaway Docker daemon for one test run (scripts/run-tests.mjs starts it when a selected test
// file mentions GANTRY_TEST_DOCKER_HOST): Debian's dockerd with its own socket, data root and exec
// root under a temp dir, and the busybox test image imported from a rootfs (no registry). Needs
// the docker.io and busybox-static packages (.ci/run installs them). A watchdog stops it and
// removes its dir when the owner process dies (a test run killed without its cleanup).
//   const d = await startTestDockerd({ ownerPid }); ... d.env (GANTRY_TEST_DOCKER_*); await d.stop();
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The image every docker test uses: busybox httpd on 8080 serving /www (GET /health, /cgi-bin/env, POST /cgi-bin/invoke). */
export const BUSYBOX_IMAGE = 'gantry-test/busybox-httpd:1';

const APP_SH = `#!/bin/sh
# the test service: prints to stdout and stderr, exits 3 at once when CRASH is set, else serves /www on 8080
echo "app: booting with MODEL=$MODEL"
echo "app: warming up" >&2
if [ -n "$CRASH" ]; then echo "app: crashing as asked ($CRASH)" >&2; exit 3; fi
/bin/busybox httpd -f -v -p 8080 -h /www &
pid=$!
trap 'kill $pid 2>/dev/null' TERM INT
wait $pid
wait $pid
echo "app: httpd ended" >&2
exit 7
`;
const ENV_CGI = `#!/bin/sh
printf 'Content-Type: text/plain\\r\\n\\r\\n'
/bin/busybox env
`;
const INVOKE_CGI = `#!/bin/sh
printf 'Content-Type: application/json\\r\\n\\r\\n'
body=$(/bin/busybox head -c "\${CONTENT_LENGTH:-0}")
printf '{"invoked_by":"busybox","method":"%s","model":"%s","body_bytes":%s}' "$REQUEST_METHOD" "$MODEL" "\${#body}"
`;

function ping(socketPath) {
  return new Promise((resolve) => {
    const req = http.get({ socketPath, path: '/_ping', timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Starts dockerd and imports the test image; resolves { env, stop } or { error } (why it could not). */
export async function startTestDockerd({ ownerPid = process.pid, log = () => undefined } = {}) {
  const dockerd = spawnSync('sh', ['-c', 'command -v dockerd'], { encoding: 'utf8' }).stdout.trim() || ['/usr/sbin/dockerd', '/usr/bin/dockerd'].find((p) => existsSync(p));
  if (!dockerd) return { error: 'dockerd is not installed (Debian package docker.io)' };
  if (spawnSync('sh', ['-c', 'command -v docker']).status !== 0) return { error: 'the docker CLI is not installed (Debian package docker.io)' };
  const busybox = ['/bin/busybox', '/usr/bin/busybox'].find((p) => existsSync(p));
  if (!busybox) return { error: 'busybox is not installed (Debian package busybox-static)' };
  const file = spawnSync('sh', ['-c', `file -L ${busybox} 2>/dev/null || true`], { encoding: 'utf8' }).stdout;
  if (file && !/statically linked|static-pie/.test(file)) return { error: `${busybox} is not statically linked (install busybox-static)` };

  const dir = mkdtempSync(join(tmpdir(), 'gantry-dockerd-'));
  // what a daemon stopped the hard way leaves mounted under its dirs (the netns file, overlays)
  const unmount = `awk '$2 ~ "^${dir}/" { print $2 }' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done`;
  const sock = join(dir, 'docker.sock');
  const pidfile = join(dir, 'dockerd.pid');
  const logfile = join(dir, 'dockerd.log');
  const out = openSync(logfile, 'a');
  const child = spawn(dockerd, ['--host', `unix://${sock}`, '--data-root', join(dir, 'data'), '--exec-root', join(dir, 'exec'), '--pidfile', pidfile], { stdio: ['ignore', out, out], detached: true });
  child.unref();
  let exited = false;
  child.on('exit', () => (exited = true));
  child.on('error', (e) => {
    exited = true;
    writeFileSync(logfile, `spawning ${dockerd}: ${e.message}\n`, { flag: 'a' });
  });
  // the watchdog: stops dockerd and removes the dir once the owner is gone
  const wd = spawn('sh', ['-c', `while kill -0 ${ownerPid} 2>/dev/null && kill -0 ${child.pid} 2>/dev/null; do sleep 1; done; kill -TERM ${child.pid} 2>/dev/null; for i in $(seq 1 30); do kill -0 ${child.pid} 2>/dev/null || break; sleep 0.5; done; kill -KILL ${child.pid} 2>/dev/null; sleep 0.5; ${unmount}; rm -rf '${dir}'`], { stdio: 'ignore', detached: true });
  wd.unref();

  const stop = async () => {
    if (!exited) {
      try {
        process.kill(child.pid, 'SIGTERM');
      } catch {}
      for (let i = 0; i < 60 && !exited; i++) await sleep(250);
      if (!exited) {
        try {
          process.kill(child.pid, 'SIGKILL');
        } catch {}
        await sleep(300);
      }
    }
    try {
      process.kill(wd.pid, 'SIGKILL');
    } catch {}
    spawnSync('sh', ['-c', unmount]);
    rmSync(dir, { recursive: true, force: true });
  };

  const deadline = Date.now() + 30_000;
  while (!(await ping(sock))) {
    if (exited || Date.now() > deadline) {
      const tail = existsSync(logfile) ? readFileSync(logfile, 'utf8').split('\n').slice(-15).join('\n') : '';
      await stop();
      return { error: `dockerd did not start (${exited ? 'it exited' : 'no answer on its socket in 30 s'}):\n${tail}` };
    }
    await sleep(200);
  }
  log(`dockerd up on ${sock} in ${dir}`);

  // the busybox image: a rootfs with the static busybox, the app script and the /www tree
  const rootfs = join(dir, 'rootfs');
  for (const d of ['bin', 'www/cgi-bin', 'tmp']) mkdirSync(join(rootfs, d), { recursive: true });
  copyFileSync(busybox, join(rootfs, 'bin/busybox'));
  chmodSync(join(rootfs, 'bin/busybox'), 0o755);
  symlinkSync('busybox', join(rootfs, 'bin/sh'));
  const files = { 'app.sh': APP_SH, 'www/index.html': 'hello from busybox\n', 'www/health': 'ok\n', 'www/cgi-bin/env': ENV_CGI, 'www/cgi-bin/invoke': INVOKE_CGI };
  for (const [p, text] of Object.entries(files)) {
    writeFileSync(join(rootfs, p), text);
    chmodSync(join(rootfs, p), 0o755);
  }
  const env = { ...process.env, DOCKER_HOST: `unix://${sock}` };
  const imp = spawnSync('sh', ['-c', `tar -C '${rootfs}' -c . | docker import -c 'CMD ["/app.sh"]' -c 'EXPOSE 8080' - ${BUSYBOX_IMAGE}`], { env, encoding: 'utf8', timeout: 60_000 });
  rmSync(rootfs, { recursive: true, force: true });
  if (imp.status !== 0) {
    await stop();
    return { error: `docker import of the busybox test image failed: ${(imp.stderr || '').trim()}` };
  }
  return {
    env: { GANTRY_TEST_DOCKER_HOST: `unix://${sock}`, GANTRY_TEST_DOCKER_SOCKET: sock, GANTRY_TEST_DOCKER_IMAGE: BUSYBOX_IMAGE, GANTRY_TEST_DOCKER_BUSYBOX: busybox },
    dir,
    stop,
  };
}
