/** The agent fleet: status, GPU, VRAM, labels, current task, last seen; refreshed every 3 seconds. */
import { useState } from 'preact/hooks';
import { api, data } from '../session.ts';
import { ErrorBox, fmtTime, Notice, Pager, short, Status, useAsync } from '../ui.tsx';

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

export function AgentsPage() {
  const [page, setPage] = useState(1);
  const list = useAsync((signal) => data(api.GET('/agents', { params: { query: { current_page: page, per_page: 50 } }, signal })).then((b) => ({ items: b.agent_list as unknown as Agent[], page_meta: b.page_meta })), [page], 3000);
  return (
    <>
      <h1>Agents</h1>
      <p>
        Start an agent with an agent credential (<a href="/credentials">Credentials</a>): <code>gantry agent --server HOST:50051 --credential ak-…</code>
      </p>
      <ErrorBox error={list.error} />
      {list.data && list.data.items.length === 0 ? <Notice>No agents have connected to this team yet.</Notice> : null}
      {list.data && list.data.items.length > 0 ? (
        <div class="scroll">
          <table>
            <caption class="sr-only">Agents of this team; the table refreshes every 3 seconds</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Status</th>
                <th scope="col">GPU</th>
                <th scope="col">VRAM</th>
                <th scope="col">Labels</th>
                <th scope="col">Current task</th>
                <th scope="col">Last seen</th>
              </tr>
            </thead>
            <tbody>
              {list.data.items.map((a) => {
                const used = a.system_stats?.gpus?.reduce((s, g) => s + g.vram_used_gb, 0);
                return (
                  <tr key={a.id} data-agent={a.display_name}>
                    <td>
                      {a.display_name}
                      <br />
                      <small>
                        <code>{short(a.id)}</code> {a.agent_version}
                      </small>
                    </td>
                    <td>
                      <Status value={a.agent_status} />
                    </td>
                    <td>{a.gpu_type ? `${a.gpu_count} × ${a.gpu_type}` : 'none'}</td>
                    <td>{used !== undefined ? `${used.toFixed(1)} / ${a.vram_total_gb} GB` : `${a.vram_total_gb} GB`}</td>
                    <td>{a.labels.length ? a.labels.map((l) => <span key={l} class="label">{l}</span>) : '—'}</td>
                    <td>{a.current_task_id ? <a href={`/tasks/${a.current_task_id}`}>{short(a.current_task_id)}</a> : '—'}</td>
                    <td>{fmtTime(a.last_seen_at)}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}
      <Pager meta={list.data?.page_meta} page={page} onPage={setPage} />
    </>
  );
}
