#!/usr/bin/env node
// The one CLI. Sources are TypeScript run through tsx's loader (no build step, no stale dist/).
import { register } from 'tsx/esm/api';
import { fileURLToPath } from 'node:url';

register();
await import(fileURLToPath(new URL('../src/cli/main.ts', import.meta.url)));
