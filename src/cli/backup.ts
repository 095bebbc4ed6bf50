import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, createReadStream, createWriteStream, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import { ConfigError, type Config } from '../shared/config.js';
import { AppError } from '../shared/errors.js';
import { createLogger } from '../shared/logger.js';
import type { ObjectStore } from '../storage/port.js';
import type { Database } from '../persistence/db.js';
import { resolveHostUrl } from '../persistence/pg-hosts.js';

/**
 * `gantry backup --out DIR` and `gantry restore --from DIR` (README Operations "Backups").
 *
 * A backup directory holds:
 * - database.dump: `pg_dump --format=custom` of the schema and data (one consistent snapshot,
 *   taken while the nodes run);
 * - objects.json: the object store's manifest, listed after the dump (so every object the dump
 *   refers to is in it, unless retention deleted it meanwhile): key, size, ETag, content type, and
 *   the SHA-256 of the objects copied;
 * - objects/<key>: the objects' bytes, copied by default for the local store (`--no-objects` to
 *   skip) and with `--objects` for S3 (whose own versioning or replication is the usual backup);
 * - manifest.json: the format, the gantry version, the PostgreSQL versions, the dump's SHA-256,
 *   the migrations the database had, the object counts.
 * Restore refuses a database that is not empty, runs pg_restore in one transaction, then puts the
 * copied objects whose key is missing from the configured store (checked against their SHA-256),
 * and reports manifest keys the store lacks. The embedded PGlite database is refused by both:
 * a stopped node's data directory copy is its backup.
 * A libpq-style multi-host DATABASE_URL (h1:p1,h2:p2, target_session_attrs=read-write: the nodes'
 * own, docs/deploy.md "PostgreSQL high availability") is resolved once, at the start, to the host
 * that is the primary now (pg-hosts.ts resolveHostUrl): pg_dump/pg_restore and every query of the
 * command then use that one server, so a failover mid-command fails it rather than splitting it
 * across two servers.
 */

export const BACKUP_FORMAT = 'gantry-backup';
export const BACKUP_FORMAT_VERSION = 1;

export interface BackupManifest {
  format: typeof BACKUP_FORMAT;
  format_version: number;
  gantry_version: string;
  created_at: string;
  database: { file: 'database.dump'; sha256: string; bytes: number; server_version: string; pg_dump_version: string; database: string; migrations: string[] };
  object_store: { driver: 'local' | 's3'; objects: number; bytes: number; copied: boolean };
}

export interface ObjectEntry {
  key: string;
  size: number;
  etag?: string;
  content_type?: string;
  /** Set when the bytes were copied (objects/<key>). */
  sha256?: string;
}

const say = (s: string): void => void process.stdout.write(s);

class BackupError extends Error {}

function embeddedRefused(cmd: 'backup' | 'restore'): ConfigError {
  return new ConfigError(
    `${cmd}: the embedded database (no DATABASE_URL) is not handled by gantry ${cmd}: stop the node and ${cmd === 'backup' ? 'copy' : 'replace'} its whole data directory (${cmd === 'backup' ? 'tar czf gantry-data.tgz -C <data dir> .' : 'pg/, storage/, secret.key'}; README Operations, Backups), or run the nodes on a PostgreSQL server (DATABASE_URL)`,
  );
}

/**
 * libpq's settings for a child process: the URL without its password (argv is visible to every
 * user of the machine) and the password in PGPASSWORD.
 */
function libpq(databaseUrl: string): { url: string; env: NodeJS.ProcessEnv; database: string } {
  const u = new URL(databaseUrl);
  const password = decodeURIComponent(u.password);
  u.password = '';
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.PGPASSWORD;
  if (password) env.PGPASSWORD = password;
  return { url: u.toString(), env, database: decodeURIComponent(u.pathname.replace(/^\//, '')) || 'postgres' };
}

/** Runs a PostgreSQL client tool; its stderr becomes the error (never the URL's password: it is not in argv). */
function run(bin: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const p = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += String(d)));
    p.stderr.on('data', (d: Buffer) => (err += String(d)));
    p.on('error', (e: NodeJS.ErrnoException) =>
      reject(new BackupError(e.code === 'ENOENT' ? `${bin} not found on the PATH: install the PostgreSQL client tools (Debian/Ubuntu: postgresql-client, of the server's major version or newer)` : `${bin}: ${e.message}`)),
    );
    p.on('close', (code) => (code === 0 ? resolvePromise(out) : reject(new BackupError(`${bin} failed (exit ${code}): ${err.trim().split('\n').slice(-3).join(' | ')}`))));
  });
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const c of createReadStream(path)) h.update(c as Buffer);
  return h.digest('hex');
}

/** Runs fn over items, `limit` at a time. */
async function eachLimit<T>(items: T[], limit: number, fn: (x: T) => Promise<void>): Promise<void> {
  let i = 0;
  const worker = async (): Promise<void> => {
    while (i < items.length) await fn(items[i++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

async function openParts(config: Config, databaseUrl: string, createDb: boolean): Promise<{ db: Database; store: ObjectStore }> {
  const { Database } = await import('../persistence/db.js');
  const { createObjectStore } = await import('../storage/index.js');
  const logger = createLogger(config.LOG_LEVEL === 'info' ? 'warn' : config.LOG_LEVEL);
  const dataDir = resolve(config.GANTRY_DATA_DIR);
  const db = await Database.open({ databaseUrl, dataDir, poolMax: 2, logger, createDatabase: createDb });
  const store = createObjectStore({
    storage: config.GANTRY_STORAGE,
    dataDir,
    // only the store's own operations are used here: no URL is handed out
    publicBaseUrl: 'http://127.0.0.1',
    secret: Buffer.alloc(32),
    s3: { endpoint: config.S3_ENDPOINT, region: config.S3_REGION, accessKeyId: config.S3_ACCESS_KEY_ID, secretAccessKey: config.S3_SECRET_ACCESS_KEY },
  });
  return { db, store };
}

/**
 * The single-host URL of the server to work on (the primary, for a multi-host URL) and how to name
 * it in the output; null (after saying why on stderr) when no host fits.
 */
async function serverUrl(cmd: 'backup' | 'restore', databaseUrl: string): Promise<{ url: string; on: string } | null> {
  try {
    const r = await resolveHostUrl(databaseUrl);
    return { url: r.url, on: r.host ? ` on ${r.host.host}:${r.host.port}` : '' };
  } catch (e) {
    process.stderr.write(`gantry ${cmd}: DATABASE_URL: ${(e as Error).message}\n`);
    return null;
  }
}

/** The path of an object's copy under DIR/objects (keys are `/`-separated safe segments, see keyProblem). */
const objectPath = (dir: string, key: string): string => join(dir, 'objects', ...key.split('/'));

export async function backup(config: Config, o: { out: string; objects?: boolean; version: string }): Promise<number> {
  if (!config.DATABASE_URL) throw embeddedRefused('backup');
  const dir = resolve(o.out);
  if (existsSync(dir) && (!statSync(dir).isDirectory() || readdirSync(dir).length > 0)) throw new ConfigError(`backup: ${dir} exists and is not an empty directory: pick a new one (a backup never overwrites another)`);
  const server = await serverUrl('backup', config.DATABASE_URL);
  if (!server) return 1;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const pg = libpq(server.url);
  const { db, store } = await openParts(config, server.url, false);
  try {
    const serverVersion = (await db.execute<{ v: string }>(`select current_setting('server_version') as v`))[0]?.v ?? '';
    const migrations = (await db.execute<{ name: string }>('select name from mikro_orm_migrations order by id').catch(() => [] as Array<{ name: string }>)).map((r) => r.name);
    const pgDumpVersion = (await run('pg_dump', ['--version'], pg.env)).trim();
    // 1. the database: one snapshot (pg_dump's own repeatable-read transaction)
    const dump = join(dir, 'database.dump');
    const t0 = Date.now();
    await run('pg_dump', ['--format=custom', '--no-owner', '--no-privileges', `--file=${dump}`, `--dbname=${pg.url}`], pg.env);
    chmodSync(dump, 0o600);
    const dumpBytes = statSync(dump).size;
    say(`database ${pg.database}${server.on}: ${dumpBytes} bytes dumped in ${Date.now() - t0} ms (PostgreSQL ${serverVersion}, ${migrations.length} migrations)\n`);

    // 2. the object store, listed after the dump: every object the dump refers to is listed
    const copy = o.objects ?? store.driver === 'local';
    const keys = (await store.listKeys('')).sort();
    const entries: ObjectEntry[] = [];
    await eachLimit(keys, 8, async (key) => {
      const info = await store.head(key);
      if (!info) return; // deleted since the listing (retention)
      const e: ObjectEntry = { key, size: info.size, ...(info.etag ? { etag: info.etag } : {}), ...(info.contentType ? { content_type: info.contentType } : {}) };
      if (copy) {
        const path = objectPath(dir, key);
        mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
        const h = createHash('sha256');
        let size = 0;
        try {
          await pipeline(
            await store.get(key),
            new Transform({
              transform(c: Buffer, _enc, cb) {
                h.update(c);
                size += c.length;
                cb(null, c);
              },
            }),
            createWriteStream(path, { mode: 0o600 }),
          );
        } catch (err) {
          // deleted since the listing (retention)
          if (err instanceof AppError && err.kind === 'not_found') return;
          throw err;
        }
        e.size = size;
        e.sha256 = h.digest('hex');
      }
      entries.push(e);
    });
    entries.sort((a, b) => (a.key < b.key ? -1 : 1));
    const bytes = entries.reduce((n, e) => n + e.size, 0);
    writeFileSync(join(dir, 'objects.json'), JSON.stringify(entries, null, 1) + '\n', { mode: 0o600 });
    const manifest: BackupManifest = {
      format: BACKUP_FORMAT,
      format_version: BACKUP_FORMAT_VERSION,
      gantry_version: o.version,
      created_at: new Date(t0).toISOString(),
      database: { file: 'database.dump', sha256: await sha256File(dump), bytes: dumpBytes, server_version: serverVersion, pg_dump_version: pgDumpVersion, database: pg.database, migrations },
      object_store: { driver: store.driver, objects: entries.length, bytes, copied: copy },
    };
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n', { mode: 0o600 });
    say(`object store (${store.driver}): ${entries.length} objects, ${bytes} bytes${copy ? ' copied' : ' listed (manifest only)'}\n`);
    say(`backup written to ${dir}\n`);
    return 0;
  } catch (e) {
    if (e instanceof BackupError) {
      process.stderr.write(`gantry backup: ${e.message}\n`);
      return 1;
    }
    throw e;
  } finally {
    await db.close();
    await store.close?.();
  }
}

export async function restore(config: Config, o: { from: string; createDb: boolean }): Promise<number> {
  if (!config.DATABASE_URL) throw embeddedRefused('restore');
  const dir = resolve(o.from);
  let manifest: BackupManifest;
  try {
    manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as BackupManifest;
  } catch (e) {
    throw new ConfigError(`restore: ${dir} is not a gantry backup (manifest.json: ${(e as Error).message})`);
  }
  if (manifest.format !== BACKUP_FORMAT || manifest.format_version !== BACKUP_FORMAT_VERSION) throw new ConfigError(`restore: ${dir}/manifest.json is not a ${BACKUP_FORMAT} version ${BACKUP_FORMAT_VERSION} manifest`);
  const dump = join(dir, manifest.database.file);
  if (!existsSync(dump) || (await sha256File(dump)) !== manifest.database.sha256) throw new ConfigError(`restore: ${dump} is missing or does not match the manifest's SHA-256: the backup is damaged`);
  const entries = JSON.parse(readFileSync(join(dir, 'objects.json'), 'utf8')) as ObjectEntry[];
  const server = await serverUrl('restore', config.DATABASE_URL);
  if (!server) return 1;
  const pg = libpq(server.url);
  const { db, store } = await openParts(config, server.url, o.createDb);
  try {
    // only into an empty database: a restore never merges into (or overwrites) live data
    const [row] = await db.execute<{ n: number }>(
      `select count(*)::int as n from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where c.relkind in ('r', 'p', 'v', 'm', 'S', 'f') and n.nspname not in ('pg_catalog', 'information_schema') and n.nspname not like 'pg_toast%' and n.nspname not like 'pg_temp%'`,
    );
    if ((row?.n ?? 0) > 0) throw new ConfigError(`restore: database ${JSON.stringify(pg.database)} is not empty (${row?.n} tables, views or sequences): restore only into an empty database (createdb a new one, or --create-db with a new name in DATABASE_URL)`);
    const t0 = Date.now();
    await run('pg_restore', ['--no-owner', '--no-privileges', '--exit-on-error', '--single-transaction', `--dbname=${pg.url}`, dump], pg.env);
    const tasks = (await db.execute<{ n: number }>('select count(*)::int as n from tasks'))[0]?.n ?? 0;
    say(`database ${pg.database}${server.on}: restored in ${Date.now() - t0} ms (backup of ${manifest.created_at}, ${manifest.database.migrations.length} migrations, ${tasks} tasks)\n`);

    // objects: the copied ones whose key the store lacks; the rest are only checked
    let put = 0;
    const missing: string[] = [];
    await eachLimit(entries, 8, async (e) => {
      const have = await store.head(e.key);
      if (have && have.size === e.size) return;
      const path = objectPath(dir, e.key);
      if (!manifest.object_store.copied || !e.sha256 || !existsSync(path)) {
        missing.push(e.key);
        return;
      }
      if ((await sha256File(path)) !== e.sha256) throw new BackupError(`object ${e.key}: its copy does not match the manifest's SHA-256 (the backup is damaged)`);
      await store.put(e.key, createReadStream(path), { contentLength: statSync(path).size, ...(e.content_type ? { contentType: e.content_type } : {}) });
      put++;
    });
    say(`object store (${store.driver}): ${put} objects restored, ${entries.length - put - missing.length} already present\n`);
    if (missing.length > 0) process.stderr.write(`gantry restore: ${missing.length} of the backup's ${entries.length} objects are not in the object store and were not copied in the backup (first: ${missing.sort()[0]})\n`);
    say(`restored from ${dir}: start the nodes on DATABASE_URL (with the same GANTRY_SECRET_KEY and GANTRY_VAULT_KEYS)\n`);
    return 0;
  } catch (e) {
    if (e instanceof BackupError) {
      process.stderr.write(`gantry restore: ${e.message}\n`);
      return 1;
    }
    throw e;
  } finally {
    await db.close();
    await store.close?.();
  }
}
