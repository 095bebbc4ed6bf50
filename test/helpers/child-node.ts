// A node as a child process (`bin/gantry.mjs serve`), for tests that SIGKILL it: the environment is
// the test's own minus every GANTRY_* and REDIS_URL setting, plus the given ones; resolves once the
// node logs "listening".
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { createInterface } from 'node:readline';

const root = new URL('../..', import.meta.url).pathname;

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
    s.on('error', reject);
  });

export function serveChild(env: Record<string, string>): Promise<{ child: ChildProcess; exit: Promise<unknown> }> {
  const clean: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_') && k !== 'REDIS_URL') clean[k] = v;
  const child = spawn(process.execPath, ['bin/gantry.mjs', 'serve'], { cwd: root, env: { ...clean, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr?.on('data', (d) => (err += d));
  const exit = new Promise((r) => child.on('exit', r));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`node did not start: ${err}`)), 30_000);
    createInterface({ input: child.stdout! }).on('line', (l) => {
      if (l.includes('"msg":"listening"')) {
        clearTimeout(timer);
        resolve({ child, exit });
      }
    });
  });
}
