/** The console shell: routes, the signed-in layout (navigation, team switcher) and the session guard. */
import { useEffect, useState } from 'preact/hooks';
import { api, Ctx, data, session, type AppCtx, type Me } from './session.ts';
import { match, navigate, Redirect, useLocation } from './router.ts';
import { ErrorBox, errorText } from './ui.tsx';
import { GantryError } from '@gantry/sdk';
import { LoginPage, RegisterPage } from './pages/auth.tsx';
import { WorkflowsPage, WorkflowPage } from './pages/workflows.tsx';
import { TasksPage, TaskPage } from './pages/tasks.tsx';
import { AgentsPage } from './pages/agents.tsx';
import { WebhooksPage, WebhookPage } from './pages/webhooks.tsx';
import { CredentialsPage } from './pages/credentials.tsx';
import { MembersPage } from './pages/members.tsx';
import { NotificationsPage } from './pages/notifications.tsx';
import { ServicesPage, ServicePage } from './pages/services.tsx';
import { PairPage } from './pages/pair.tsx';

const NAV: Array<[string, string]> = [
  ['/workflows', 'Workflows'],
  ['/tasks', 'Tasks'],
  ['/agents', 'Agents'],
  ['/services', 'Services'],
  ['/webhooks', 'Webhooks'],
  ['/credentials', 'Credentials'],
  ['/members', 'Members'],
  ['/notifications', 'Notifications'],
  ['/devices', 'Pair a device'],
];

type Route = [pattern: string, render: (p: Record<string, string>) => preact.JSX.Element, title: string];

const ROUTES: Route[] = [
  ['/workflows', () => <WorkflowsPage />, 'Workflows'],
  ['/workflows/:id', (p) => <WorkflowPage id={p.id as string} />, 'Workflow'],
  ['/tasks', () => <TasksPage />, 'Tasks'],
  ['/tasks/:id', (p) => <TaskPage id={p.id as string} />, 'Task'],
  ['/agents', () => <AgentsPage />, 'Agents'],
  ['/services', () => <ServicesPage />, 'Services'],
  ['/services/:id', (p) => <ServicePage id={p.id as string} />, 'Service'],
  ['/webhooks', () => <WebhooksPage />, 'Webhooks'],
  ['/webhooks/:id', (p) => <WebhookPage id={p.id as string} />, 'Webhook'],
  ['/credentials', () => <CredentialsPage />, 'Credentials'],
  ['/members', () => <MembersPage />, 'Members'],
  ['/notifications', () => <NotificationsPage />, 'Notifications'],
  ['/devices', () => <PairPage />, 'Pair a device'],
];

function useSession() {
  const [, set] = useState(0);
  useEffect(() => session.subscribe(() => set((n) => n + 1)), []);
  return session.get();
}

/** Every team of the user (every page of GET /teams): the roles behind the team switcher. */
async function allTeams(): Promise<{ team_list: Array<{ id: string; member_role?: unknown }> }> {
  const team_list: Array<{ id: string; member_role?: unknown }> = [];
  for (let page = 1; ; page++) {
    const b = await data(api.GET('/teams', { params: { query: { current_page: page, per_page: 100 } } }));
    team_list.push(...b.team_list);
    if (b.team_list.length === 0 || page * 100 >= b.page_meta.total_count) return { team_list };
  }
}

export function App() {
  const { path } = useLocation();
  const s = useSession();
  if (path === '/login' || path === '/register') {
    if (s.tokens) return <Redirect to="/workflows" />;
    return path === '/login' ? <LoginPage /> : <RegisterPage />;
  }
  if (!s.tokens) {
    const next = path === '/' ? '' : `?next=${encodeURIComponent(path + location.search)}`;
    return <Redirect to={`/login${next}`} />;
  }
  return <SignedIn path={path} />;
}

function SignedIn({ path }: { path: string }) {
  const s = session.get();
  const [me, setMe] = useState<Me | null>(null);
  const [roles, setRoles] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  const [menuOpen, setMenuOpen] = useState(false);
  useEffect(() => {
    let stop = false;
    Promise.all([data(api.GET('/users/me')), allTeams()])
      .then(([m, teams]) => {
        if (stop) return;
        setMe(m);
        setRoles(Object.fromEntries(teams.team_list.map((t) => [t.id, String(t.member_role)])));
        const cur = session.get().teamId;
        if (!cur || !m.team_list.some((t) => t.id === cur)) session.setTeam(m.team_list[0]?.id ?? null);
      })
      .catch((e: unknown) => {
        if (stop) return;
        if (e instanceof GantryError && e.status === 401) session.setTokens(null);
        else setError(e);
      });
    return () => {
      stop = true;
    };
  }, [tick]);
  useEffect(() => setMenuOpen(false), [path]);

  if (path === '/') return <Redirect to="/workflows" />;
  if (error) return <main class="auth"><ErrorBox error={error} /></main>;
  if (!me || !s.teamId) return <main class="auth" aria-busy="true"><p>Loading…</p></main>;

  let page: preact.JSX.Element | null = null;
  let title = 'Not found';
  for (const [pattern, render, t] of ROUTES) {
    const p = match(pattern, path);
    if (p) {
      page = render(p);
      title = t;
      break;
    }
  }
  document.title = `${title} · Gantry`;
  const ctx: AppCtx = { me, teamId: s.teamId, role: roles[s.teamId] ?? 'member', reloadMe: () => setTick((n) => n + 1) };
  const signOut = (): void => {
    const t = session.get().tokens;
    if (t) void api.POST('/auth/logout', { body: { refresh_token: t.refresh_token } }).catch(() => undefined);
    session.setTokens(null);
  };
  return (
    <Ctx.Provider value={ctx}>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href="/workflows">
          Gantry
        </a>
        <button type="button" class="menu" aria-expanded={menuOpen} aria-controls="nav" onClick={() => setMenuOpen(!menuOpen)}>
          Menu
        </button>
        <div class="team">
          <label for="team-switcher">Team</label>
          <select
            id="team-switcher"
            value={s.teamId}
            onChange={(e) => {
              session.setTeam(e.currentTarget.value);
              navigate(path.split('/').slice(0, 2).join('/') || '/workflows');
            }}
          >
            {me.team_list.map((t) => (
              <option key={t.id} value={t.id}>
                {t.display_name}
              </option>
            ))}
          </select>
        </div>
        <span class="who" title={me.email_address}>
          {me.display_name}
        </span>
        <button type="button" onClick={signOut}>
          Sign out
        </button>
      </header>
      <div class="layout">
        <nav id="nav" class={menuOpen ? 'open' : ''} aria-label="Console">
          <ul>
            {NAV.map(([href, label]) => (
              <li key={href}>
                <a href={href} aria-current={path === href || path.startsWith(`${href}/`) ? 'page' : undefined}>
                  {label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <main id="main" tabIndex={-1} key={s.teamId}>
          {page ?? (
            <>
              <h1>Not found</h1>
              <p>{errorText(`There is no console page at ${path}.`)}</p>
            </>
          )}
        </main>
      </div>
    </Ctx.Provider>
  );
}
