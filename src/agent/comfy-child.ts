/** What the agent's ComfyUI child processes (ComfyUI itself, pip) share: their environment and their output lines. */

/**
 * The environment of ComfyUI and of pip: the agent's own, minus every GANTRY_* variable (the agent
 * credential among them): custom node packages and setup scripts are third-party code.
 */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('GANTRY_')) env[k] = v;
  return { ...env, ...extra };
}

/** Splits a byte stream into lines (\n, \r\n or \r: progress bars), calling fn for each non-empty one. */
export function lineSplitter(fn: (line: string) => void): (chunk: Buffer) => void {
  let buf = '';
  return (chunk) => {
    buf += chunk.toString('utf8');
    const parts = buf.split(/\r\n|\n|\r/);
    buf = parts.pop() ?? '';
    if (buf.length > 64 * 1024) {
      parts.push(buf);
      buf = '';
    }
    for (const p of parts) if (p.trim()) fn(p.length > 2000 ? `${p.slice(0, 2000)}...` : p);
  };
}
