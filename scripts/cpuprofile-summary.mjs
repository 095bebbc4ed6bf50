#!/usr/bin/env node
/**
 * Summarises a V8 CPU profile (`node --cpu-prof` writes *.cpuprofile): the top self-time functions
 * (with file:line) and the self time grouped by area: our src/<folder>, each node_modules package,
 * node internals (node:*), native/V8 builtins, GC, and (idle)/(program).
 *
 *   node scripts/cpuprofile-summary.mjs <file.cpuprofile | directory> [--top 40] [--tasks N] [--callers NAME]...
 *
 * --callers NAME (repeatable): for the functions named NAME, the self time split by the first
 * caller library frame and the first two frames of our src/ (where a native fs/socket call
 * comes from).
 * A directory: the newest *.cpuprofile in it. --tasks N adds a ms-per-task column (self time / N).
 * Self time of a function = the sum of the sample intervals whose leaf frame is that function.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

const args = process.argv.slice(2);
let file = null;
let top = 40;
let tasks = 0;
const callersOf = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--top') top = Number(args[++i]);
  else if (args[i] === '--tasks') tasks = Number(args[++i]);
  else if (args[i] === '--callers') callersOf.push(args[++i]);
  else file = args[i];
}
if (!file) {
  console.error('usage: cpuprofile-summary.mjs <file.cpuprofile | dir> [--top N] [--tasks N]');
  process.exit(2);
}
if (statSync(file).isDirectory()) {
  const files = readdirSync(file).filter((f) => f.endsWith('.cpuprofile')).map((f) => path.join(file, f));
  if (files.length === 0) throw new Error(`no .cpuprofile in ${file}`);
  file = files.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
}
const prof = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const selfUs = new Map();
for (let i = 0; i < prof.samples.length; i++) {
  const id = prof.samples[i];
  const dt = prof.timeDeltas[i + 1] ?? 0; // the interval after sample i belongs to it
  selfUs.set(id, (selfUs.get(id) ?? 0) + Math.max(0, dt));
}
const total = [...selfUs.values()].reduce((a, b) => a + b, 0);

function area(cf) {
  const name = cf.functionName;
  const url = cf.url ?? '';
  if (name === '(garbage collector)') return 'GC';
  if (name === '(idle)') return '(idle)';
  if (name === '(program)') return '(program)';
  if (name === '(root)') return '(root)';
  if (url === '') return 'native/V8 builtins';
  if (url.startsWith('node:')) return 'node internals';
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 14).split('/');
    return `node_modules/${rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]}`;
  }
  const src = url.indexOf('/src/');
  if (src >= 0) {
    const parts = url.slice(src + 5).split('/');
    return parts.length > 1 ? `src/${parts[0]}` : `src/${parts[0]}`;
  }
  return 'other';
}
function where(cf) {
  const url = (cf.url ?? '').replace(/^file:\/\//, '');
  if (!url) return '';
  const src = url.indexOf('/src/');
  const nm = url.lastIndexOf('/node_modules/');
  const short = nm >= 0 ? url.slice(nm + 1) : src >= 0 ? url.slice(src + 1) : url;
  return `${short}:${cf.lineNumber + 1}`;
}

const fn = new Map();
const areas = new Map();
for (const [id, us] of selfUs) {
  const n = byId.get(id);
  const cf = n.callFrame;
  const key = `${cf.functionName || '(anonymous)'}\t${where(cf)}`;
  fn.set(key, (fn.get(key) ?? 0) + us);
  const a = area(cf);
  areas.set(a, (areas.get(a) ?? 0) + us);
}
const busy = total - (areas.get('(idle)') ?? 0);
const ms = (us) => (us / 1000).toFixed(1).padStart(9);
const pct = (us, of) => ((us / of) * 100).toFixed(1).padStart(5) + '%';
const perTask = (us) => (tasks > 0 ? (us / 1000 / tasks).toFixed(3).padStart(8) : '');
console.log(`profile ${file}`);
console.log(`sampled ${(total / 1e6).toFixed(2)} s, busy (not idle) ${(busy / 1e6).toFixed(2)} s${tasks > 0 ? `, ${tasks} tasks: ${(busy / 1000 / tasks).toFixed(3)} ms busy per task` : ''}`);
console.log(`\nself time by area (% of busy)${tasks > 0 ? ', ms/task' : ''}`);
for (const [a, us] of [...areas].sort((x, y) => y[1] - x[1])) {
  if (a === '(idle)') continue;
  console.log(`${ms(us)} ms ${pct(us, busy)} ${perTask(us)}  ${a}`);
}
console.log(`\ntop ${top} functions by self time (% of busy)`);
for (const [k, us] of [...fn].sort((x, y) => y[1] - x[1]).slice(0, top)) {
  const [name, loc] = k.split('\t');
  if (name === '(idle)') continue;
  console.log(`${ms(us)} ms ${pct(us, busy)} ${perTask(us)}  ${name}  ${loc}`);
}

for (const name of callersOf) {
  const parent = new Map();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const by = new Map();
  let sum = 0;
  for (const [id, us] of selfUs) {
    const n = byId.get(id);
    if (n.callFrame.functionName !== name) continue;
    sum += us;
    // the first library frame, then the first two frames of our own src/
    const chain = [];
    let ours = 0;
    for (let p = parent.get(id); p !== undefined && ours < 2; p = parent.get(p)) {
      const cf = byId.get(p).callFrame;
      const a = area(cf);
      if (a === 'node internals' || a === 'native/V8 builtins' || a === '(root)') continue;
      if (a.startsWith('src/')) ours++;
      else if (chain.length > 0) continue;
      chain.push(`${cf.functionName || '(anonymous)'} ${where(cf)}`);
    }
    const k = chain.join(' <- ') || '(no caller in our code)';
    by.set(k, (by.get(k) ?? 0) + us);
  }
  console.log(`\ncallers of ${name}: ${ms(sum)} ms`);
  for (const [k, us] of [...by].sort((x, y) => y[1] - x[1]).slice(0, 12)) console.log(`${ms(us)} ms ${pct(us, sum)}  ${k}`);
}
