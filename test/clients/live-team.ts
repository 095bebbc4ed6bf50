/**
 * A node with a team, an sk- and a simulate agent online, for the client tests that drive the API
 * from outside this process (the packed SDK in a temp project, the Python client): a workflow whose
 * parameters are `prompt` (text) and `image` (a file), under the slug the caller picks.
 */
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, agentsOf, type AgentProcess, type TeamSetup } from '../agents/helpers.js';

export interface LiveTeam {
  t: TestNode;
  s: TeamSetup;
  agent: AgentProcess;
  /** The workflow's slug (parameters: prompt, image). */
  slug: string;
  /** The node's origin (http://127.0.0.1:port) and API base (…/api/v1). */
  origin: string;
  baseUrl: string;
  stop(): Promise<void>;
}

/** A 1x1 PNG. */
export const TINY_PNG = Buffer.from('89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082', 'hex');

export async function startLiveTeam(label: string, slug: string): Promise<LiveTeam> {
  const t = await startTestNode({}, label);
  let agent: AgentProcess | null = null;
  try {
    const s = await setupTeam(t);
    await createWorkflow(t, s, tinyGraph(4, { '10': { class_type: 'LoadImage', inputs: { image: 'example.png' } } }), {
      workflow_slug: slug,
      parameters: [
        { key: 'prompt', node_id: '6', field: 'text' },
        { key: 'image', type: 'file', node_id: '10', field: 'image', required: false },
      ],
    });
    const a = spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir(`gantry-${label}-agent-`), '--simulate-duration-ms', '300', '--simulate-steps', '4']);
    agent = a;
    await waitFor('an online agent', async () => (await agentsOf(t, s)).find((x) => x.agent_status !== 'offline') ?? null, 30_000);
    return {
      t,
      s,
      agent: a,
      slug,
      origin: t.origin,
      baseUrl: t.baseUrl,
      async stop() {
        a.kill('SIGKILL');
        await a.exited;
        await t.stop();
      },
    };
  } catch (e) {
    agent?.kill('SIGKILL');
    await agent?.exited;
    await t.stop();
    throw e;
  }
}
