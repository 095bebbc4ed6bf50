/**
 * Model and custom node sync, server side (docs/api.md "Sync manifest").
 *
 * - syncManifest(teamId): what a team's agents must hold: every active model
 *   {model_path, size, sha256, download_url} and every active custom node package
 *   {package_name, node_version, inventory_name, size, sha256, download_url}. The agent program
 *   downloads what it lacks, checks size and SHA-256, places models at <models dir>/<model_path>
 *   and unpacks packages into <custom_nodes dir>/<package_name>, then reports its inventory.
 * - needsSync(teamId, inventory): true when an active model path or an active node's
 *   inventory_name (`<package_name>@<node_version>`) is missing from the agent's inventory. The
 *   scheduler sends a task to such an agent with provision=true (task state provisioning).
 *
 * The edge's SyncAwareSessions (src/edge/agents/sessions.ts) calls needsSync to keep
 * AgentInfo.needsSync right for live sessions; this module does not know the edge.
 */
import type { ObjectStore } from '../storage/port.js';
import type { ModelRegistry, NodeRegistry } from './registry.js';

export interface AgentInventory {
  /** Model paths relative to the runtime's models root. */
  models: string[];
  /** Installed custom node packages as `<package_name>@<node_version>`. */
  customNodes: string[];
}

export interface SyncModel {
  id: string;
  model_path: string;
  model_type: string;
  size: number;
  sha256: string;
  download_url: string;
}

export interface SyncCustomNode {
  id: string;
  package_name: string;
  node_version: string;
  /** What the agent reports in its inventory once installed. */
  inventory_name: string;
  size: number;
  sha256: string;
  download_url: string;
}

export interface SyncManifest {
  models: SyncModel[];
  custom_nodes: SyncCustomNode[];
  /** ISO; when the download URLs stop working (ask again after). */
  expires_at: string;
}

export const nodeInventoryName = (packageName: string, nodeVersion: string): string => `${packageName}@${nodeVersion}`;

interface Requirements {
  at: number;
  models: string[];
  nodes: string[];
}

export interface ModelSyncOptions {
  models: ModelRegistry;
  nodes: NodeRegistry;
  store: ObjectStore;
  now: () => number;
  /** Lifetime of manifest download URLs. Default 6 h. */
  urlTtlS?: number;
  /** How long needsSync trusts its per-team cache (other nodes' changes). Default 5 s. */
  cacheMs?: number;
}

export class ModelSync {
  private cache = new Map<string, Requirements>();

  constructor(private readonly o: ModelSyncOptions) {}

  /** Every active model and custom node of the team with a presigned download URL. */
  async syncManifest(teamId: string, opts: { missingFor?: AgentInventory } = {}): Promise<SyncManifest> {
    const ttl = this.o.urlTtlS ?? 6 * 3600;
    const [models, nodes] = await Promise.all([this.o.models.active(teamId), this.o.nodes.active(teamId)]);
    const haveModels = new Set(opts.missingFor?.models ?? []);
    const haveNodes = new Set(opts.missingFor?.customNodes ?? []);
    const out: SyncManifest = { models: [], custom_nodes: [], expires_at: new Date(this.o.now() + ttl * 1000).toISOString() };
    for (const m of models) {
      if (haveModels.has(m.modelPath)) continue;
      out.models.push({ id: m.id, model_path: m.modelPath, model_type: m.modelType, size: m.fileSize, sha256: m.sha256, download_url: await this.o.store.presignGet(m.storageKey, { expiresInS: ttl }) });
    }
    for (const n of nodes) {
      const inv = nodeInventoryName(n.packageName, n.nodeVersion);
      if (haveNodes.has(inv)) continue;
      out.custom_nodes.push({
        id: n.id,
        package_name: n.packageName,
        node_version: n.nodeVersion,
        inventory_name: inv,
        size: n.fileSize,
        sha256: n.sha256,
        download_url: await this.o.store.presignGet(n.storageKey, { expiresInS: ttl }),
      });
    }
    return out;
  }

  private async requirements(teamId: string): Promise<Requirements> {
    const now = this.o.now();
    const c = this.cache.get(teamId);
    if (c && now - c.at < (this.o.cacheMs ?? 5000) && now >= c.at) return c;
    const [models, nodes] = await Promise.all([this.o.models.active(teamId), this.o.nodes.active(teamId)]);
    const r = { at: now, models: models.map((m) => m.modelPath), nodes: nodes.map((n) => nodeInventoryName(n.packageName, n.nodeVersion)) };
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(teamId, r);
    return r;
  }

  /** True when the agent lacks an active model or custom node of its team. */
  async needsSync(teamId: string, inventory: AgentInventory): Promise<boolean> {
    const r = await this.requirements(teamId);
    if (r.models.length === 0 && r.nodes.length === 0) return false;
    const models = new Set(inventory.models);
    const nodes = new Set(inventory.customNodes);
    return r.models.some((p) => !models.has(p)) || r.nodes.some((n) => !nodes.has(n));
  }

  invalidate(teamId: string): void {
    this.cache.delete(teamId);
  }
}
