/**
 * The import graph between src/ folders (issue 27): no cycle between folders, so every arrow points
 * one way down the layers (faces → app → actors/domain → ports ← adapters). Each folder's imports
 * are read from its sources (static `from '…'` specifiers, relative ones), folded to the top-level
 * folder, and the folder graph is checked for strongly connected components larger than one.
 * src/gen (generated) is left out; src/main.ts is the composition root and may import everything.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const src = join(root, 'src');

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((e) => {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) return p === join(src, 'gen') ? [] : walk(p);
    return p.endsWith('.ts') ? [p] : [];
  });
}

/** Top-level folder of a file under src/ ('' for src/main.ts and other root files). */
const folderOf = (file: string): string => {
  const parts = relative(src, file).split('/');
  return parts.length > 1 ? (parts[0] ?? '') : '';
};

/** folder → folders it imports (with one example file per arrow, for the failure message). */
function folderGraph(): Map<string, Map<string, string>> {
  const g = new Map<string, Map<string, string>>();
  for (const file of walk(src)) {
    const from = folderOf(file);
    if (from === '') continue;
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/\bfrom\s+'(\.{1,2}\/[^']+)'/g)) {
      const target = resolve(dirname(file), m[1] ?? '');
      if (!target.startsWith(src + '/')) continue;
      const to = folderOf(target);
      if (to === '' || to === from || to === 'gen') continue;
      const edges = g.get(from) ?? new Map<string, string>();
      if (!edges.has(to)) edges.set(to, relative(root, file));
      g.set(from, edges);
    }
  }
  return g;
}

/** Strongly connected components (Tarjan) with more than one folder: the cycles. */
function cycles(g: Map<string, Map<string, string>>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const nodes = new Set<string>([...g.keys(), ...[...g.values()].flatMap((e) => [...e.keys()])]);
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of g.get(v)?.keys() ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v) ?? 0, idx.get(w) ?? 0));
    }
    if (low.get(v) === idx.get(v)) {
      const comp: string[] = [];
      for (;;) {
        const w = stack.pop() as string;
        on.delete(w);
        comp.push(w);
        if (w === v) break;
      }
      if (comp.length > 1) out.push(comp.sort());
    }
  };
  for (const v of nodes) if (!idx.has(v)) visit(v);
  return out;
}

test('no import cycle between src/ folders', () => {
  const g = folderGraph();
  const found = cycles(g).map((comp) => {
    const arrows = comp.flatMap((a) => comp.filter((b) => g.get(a)?.has(b)).map((b) => `${a} -> ${b} (${g.get(a)?.get(b)})`));
    return `{${comp.join(', ')}}: ${arrows.join('; ')}`;
  });
  assert.deepEqual(found, [], 'folders that import each other, directly or around a loop');
});

test('the cycle check sees a cycle when there is one (a synthetic graph)', () => {
  const g = new Map([
    ['a', new Map([['b', 'x']])],
    ['b', new Map([['c', 'y']])],
    ['c', new Map([['a', 'z']])],
  ]);
  assert.deepEqual(cycles(g), [['a', 'b', 'c']]);
  assert.deepEqual(cycles(new Map([['a', new Map([['b', 'x']])]])), []);
});
