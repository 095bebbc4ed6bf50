/** The agent fleet: status, GPU, VRAM, labels, current task, last seen; refreshed every 3 seconds. */
import { useState } from 'preact/hooks';
import { api, data } from '../session.ts';
import { DataTable, ErrorBox, fmtTime, Notice, Pager, short, Status, useAsync } from '../ui.tsx';

interface Agent {
  id: string;
  display_name: string;
  agent_status: string;
  labels: string[];
  gpu_type: string;
  gpu_count: number;
  vram_total_gb: number;
  current_task_id: string | null;
  last_seen_at: string | null;
  agent_version: string;
  system_stats: { gpus?: Array<{ utilization_percent: number; vram_used_gb: number; vram_total_gb: number }>; running_tasks?: number } | null;
}

/** VRAM in use of the total, where the agent reports its GPUs' usage. */
function vram(a: Agent): string {
  const used = a.system_stats?.gpus?.reduce((s, g) => s + g.vram_used_gb, 0);
  if (a.gpu_count === 0 && !a.vram_total_gb) return 'no GPU';
  return used !== undefined ? `${used.toFixed(1)} / ${a.vram_total_gb} GB` : `${a.vram_total_gb} GB`;
}

export function AgentsPage() {
  const [page, setPage] = useState(1);
  const info = useAsync((signal) => data(api.GET('/server-info', { signal })), []);
  const grpcPort = info.data?.agent_grpc_port;
  const list = useAsync((signal) => data(api.GET('/agents', { params: { query: { current_page: page, per_page: 50 } }, signal })).then((b) => ({ items: b.agent_list as unknown as Agent[], page_meta: b.page_meta })), [page], 3000);
  return (
    <>
      <h1>Agents</h1>
      <p>
        Start an agent with an agent credential (<a href="/credentials">Credentials</a>) from a clone of the repository; <code>--executor simulate</code> needs no GPU.
        {grpcPort ? (
          <>
            {' '}
            Over gRPC (this node's agent port, {grpcPort}): <code data-hint="grpc">{`npx gantry agent --executor simulate --server ${location.hostname}:${grpcPort}${info.data?.agent_grpc_tls ? ' --tls' : ''} --credential ak-…`}</code>, or
          </>
        ) : null}{' '}
        over this node's WebSocket address (its HTTP port, through any proxy that passes WebSockets):{' '}
        <code data-hint="ws">npx gantry agent --executor simulate --server {`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}`} --credential ak-…</code>
      </p>
      <ErrorBox error={list.error} />
      <DataTable
        caption="Agents of this team; the table refreshes every 3 seconds"
        rows={list.data?.items}
        rowKey={(a) => a.id}
        rowAttrs={(a) => ({ 'data-agent': a.display_name })}
        empty={<Notice>No agents have connected to this team yet.</Notice>}
        columns={[
          {
            header: 'Name',
            cell: (a) => (
              <>
                {a.display_name}
                <br />
                <small>
                  <code>{short(a.id)}</code> {a.agent_version}
                </small>
              </>
            ),
          },
          { header: 'Status', cell: (a) => <Status value={a.agent_status} /> },
          { header: 'GPU', cell: (a) => (a.gpu_type ? `${a.gpu_count} × ${a.gpu_type}` : 'none') },
          { header: 'VRAM', cell: vram },
          { header: 'Labels', cell: (a) => (a.labels.length ? a.labels.map((l) => <span key={l} class="label">{l}</span>) : '—') },
          { header: 'Current task', cell: (a) => (a.current_task_id ? <a href={`/tasks/${a.current_task_id}`}>{short(a.current_task_id)}</a> : '—') },
          { header: 'Last seen', cell: (a) => fmtTime(a.last_seen_at) },
        ]}
      />
      <Pager meta={list.data?.page_meta} page={page} onPage={setPage} />
    </>
  );
}
