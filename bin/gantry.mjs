#!/usr/bin/env node
// The one CLI. Sources are TypeScript run through tsx's loader (no build step, no stale dist/).
import { register } from 'tsx/esm/api';
import { fileURLToPath } from 'node:url';

// the repository's tsconfig whatever the working directory: its `paths` map @gantry/sdk to the SDK's
// sources (packages/sdk/src), so the CLI never depends on a built packages/sdk/dist
register({ tsconfig: fileURLToPath(new URL('../tsconfig.json', import.meta.url)) });
await import(fileURLToPath(new URL('../src/cli/main.ts', import.meta.url)));
