/**
 * A small router: exact segments and `{param}` segments, plus a trailing `*` that captures the rest
 * of the path (proxy). Method mismatch on a known path is a 405; no path match is a 404.
 */
export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'HEAD' | 'OPTIONS' | 'ANY';

interface Node<R> {
  statics: Map<string, Node<R>>;
  param?: { name: string; node: Node<R> };
  wildcard?: Map<string, R>;
  routes: Map<string, R>;
}

const newNode = <R>(): Node<R> => ({ statics: new Map(), routes: new Map() });

export interface Match<R> {
  route: R;
  params: Record<string, string>;
}

export class Router<R> {
  private root: Node<R> = newNode();
  readonly all: Array<{ method: Method; path: string; route: R }> = [];

  add(method: Method, path: string, route: R): void {
    const segs = path.split('/').filter(Boolean);
    let node = this.root;
    for (let i = 0; i < segs.length; i++) {
      const s = segs[i] as string;
      if (s === '*') {
        if (i !== segs.length - 1) throw new Error(`wildcard must be last: ${path}`);
        node.wildcard ??= new Map();
        if (node.wildcard.has(method)) throw new Error(`duplicate route ${method} ${path}`);
        node.wildcard.set(method, route);
        this.all.push({ method, path, route });
        return;
      }
      const m = /^\{([a-zA-Z_][a-zA-Z0-9_]*)\}$/.exec(s);
      if (m) {
        const name = m[1] as string;
        if (node.param && node.param.name !== name) throw new Error(`conflicting param names at ${path}`);
        node.param ??= { name, node: newNode() };
        node = node.param.node;
      } else {
        let next = node.statics.get(s);
        if (!next) node.statics.set(s, (next = newNode()));
        node = next;
      }
    }
    if (node.routes.has(method)) throw new Error(`duplicate route ${method} ${path}`);
    node.routes.set(method, route);
    this.all.push({ method, path, route });
  }

  /** Returns the match, 'method_not_allowed' or null. */
  find(method: string, path: string): Match<R> | 'method_not_allowed' | null {
    const st: Walk = { method, segs: path.split('/').filter(Boolean), params: null, pathMatched: false };
    const route = walk(st, this.root, 0);
    if (route) return { route, params: st.params ?? {} };
    return st.pathMatched ? 'method_not_allowed' : null;
  }
}

/** One lookup's state: module-level functions over it instead of closures made per request. */
interface Walk {
  method: string;
  segs: string[];
  params: Record<string, string> | null;
  pathMatched: boolean;
}

function routeFor<R>(node: Node<R>, method: string): R | undefined {
  return node.routes.get(method) ?? node.routes.get('ANY') ?? (method === 'HEAD' ? node.routes.get('GET') : undefined);
}

function walk<R>(st: Walk, node: Node<R>, i: number): R | null {
  const { segs, method } = st;
  if (node.wildcard) {
    const r = node.wildcard.get(method) ?? node.wildcard.get('ANY');
    // try more specific routes first
    const deeper = i < segs.length ? step(st, node, i) : null;
    if (deeper) return deeper;
    if (i === segs.length) {
      const exact = routeFor(node, method);
      if (exact) return exact;
    }
    if (r) {
      (st.params ??= {})['*'] = segs.slice(i).join('/');
      return r;
    }
    st.pathMatched = true;
  }
  if (i === segs.length) {
    if (node.routes.size === 0) return null;
    const r = routeFor(node, method);
    if (!r) st.pathMatched = true;
    return r ?? null;
  }
  return step(st, node, i);
}

function step<R>(st: Walk, node: Node<R>, i: number): R | null {
  const s = st.segs[i] as string;
  const next = node.statics.get(s);
  if (next) {
    const r = walk(st, next, i + 1);
    if (r) return r;
  }
  if (node.param) {
    let v: string;
    try {
      v = s.includes('%') ? decodeURIComponent(s) : s;
    } catch {
      return null;
    }
    const r = walk(st, node.param.node, i + 1);
    if (r) {
      (st.params ??= {})[node.param.name] = v;
      return r;
    }
  }
  return null;
}
