/**
 * Sign in and register (public pages). The sign-in page offers a button per single sign-on
 * provider of GET /server-info; the provider's login comes back to /login?sso_code=… (or
 * ?sso_error=…), and the one-time code is exchanged for the session's tokens here.
 */
import { useEffect, useState } from 'preact/hooks';
import { api, data, session } from '../session.ts';
import { navigate } from '../router.ts';
import { ErrorBox, useAction, useAsync } from '../ui.tsx';

/** What a refused single sign-on (`?sso_error=<error_code>`) tells the user. */
const SSO_ERRORS: Record<string, string> = {
  oidc_account_exists: 'an account with this email address already exists; sign in with your password',
  oidc_user_unknown: 'this server only lets existing users sign in with this provider',
  oidc_denied: 'the provider did not allow the sign-in',
  oidc_state_expired: 'the sign-in took too long; try again',
  oidc_email_missing: 'the provider did not share an email address',
};

async function signIn(email: string, password: string): Promise<void> {
  const t = await data(api.POST('/auth/login', { body: { email_address: email, password } }));
  session.setTokens({ access_token: t.access_token, refresh_token: t.refresh_token });
}

function afterSignIn(): void {
  const next = new URLSearchParams(location.search).get('next');
  navigate(next && next.startsWith('/') && !next.startsWith('//') ? next : '/workflows', true);
}

/** Where the provider sends the browser back: this page, keeping `next`. */
function ssoStart(providerId: string): string {
  const next = new URLSearchParams(location.search).get('next');
  const back = `${location.origin}/login${next ? `?next=${encodeURIComponent(next)}` : ''}`;
  return `/api/v1/auth/oidc/${encodeURIComponent(providerId)}/start?return_to=${encodeURIComponent(back)}`;
}

export function LoginPage() {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const a = useAction();
  const info = useAsync((signal) => data(api.GET('/server-info', { signal })), []);
  const providers = info.data?.oauth_providers ?? [];
  const q = new URLSearchParams(location.search);
  const ssoError = q.get('sso_error');
  // back from the provider: exchange the one-time code for the session (once)
  useEffect(() => {
    const code = q.get('sso_code');
    if (!code) return;
    void a
      .run(async () => {
        // (the single sign-on routes exist only where providers are configured: not in the SDK's schema)
        const r = await fetch('/api/v1/auth/oidc/exchange', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ sso_code: code }) });
        const b = (await r.json().catch(() => ({}))) as { access_token?: string; refresh_token?: string; error_message?: string };
        if (!r.ok || !b.access_token || !b.refresh_token) throw new Error(`Single sign-on failed: ${b.error_message ?? `HTTP ${r.status}`}`);
        const t = { access_token: b.access_token, refresh_token: b.refresh_token };
        session.setTokens({ access_token: t.access_token, refresh_token: t.refresh_token });
      })
      .then((ok) => ok && afterSignIn());
  }, []);
  const submit = (ev: Event): void => {
    ev.preventDefault();
    void a.run(() => signIn(email, password)).then((ok) => ok && afterSignIn());
  };
  return (
    <main class="auth">
      <h1>Sign in to Gantry</h1>
      <form onSubmit={submit}>
        <label for="email">Email address</label>
        <input id="email" type="email" autocomplete="username" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
        <label for="password">Password</label>
        <input id="password" type="password" autocomplete="current-password" required value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
        <ErrorBox error={a.error} />
        {ssoError ? <ErrorBox error={`Single sign-on failed: ${SSO_ERRORS[ssoError] ?? ssoError}`} /> : null}
        <button type="submit" class="primary" disabled={a.busy}>
          Sign in
        </button>
      </form>
      {providers.length > 0 ? (
        <section aria-labelledby="sso-h" class="sso">
          <h2 id="sso-h">Single sign-on</h2>
          <ul>
            {providers.map((p) => (
              <li key={p.id}>
                <a class="button" href={ssoStart(p.id)} data-provider={p.id}>
                  Sign in with {p.display_name}
                </a>
              </li>
            ))}
          </ul>
        </section>
      ) : null}
      {info.data?.registration_enabled === false ? null : (
        <p>
          No account? <a href={`/register${location.search}`}>Register</a>
        </p>
      )}
    </main>
  );
}

export function RegisterPage() {
  const [f, setF] = useState({ first_name: '', last_name: '', email_address: '', password: '' });
  const a = useAction();
  const set = (k: keyof typeof f) => (e: { currentTarget: HTMLInputElement }) => setF({ ...f, [k]: e.currentTarget.value });
  const submit = (ev: Event): void => {
    ev.preventDefault();
    void a
      .run(async () => {
        await api.POST('/auth/register', { body: f });
        await signIn(f.email_address, f.password);
      })
      .then((ok) => ok && afterSignIn());
  };
  return (
    <main class="auth">
      <h1>Create a Gantry account</h1>
      <form onSubmit={submit}>
        <label for="first_name">First name</label>
        <input id="first_name" required maxLength={100} autocomplete="given-name" value={f.first_name} onInput={set('first_name')} />
        <label for="last_name">Last name</label>
        <input id="last_name" required maxLength={100} autocomplete="family-name" value={f.last_name} onInput={set('last_name')} />
        <label for="email_address">Email address</label>
        <input id="email_address" type="email" required autocomplete="email" value={f.email_address} onInput={set('email_address')} />
        <label for="new_password">Password (at least 10 characters)</label>
        <input id="new_password" type="password" required minLength={10} maxLength={256} autocomplete="new-password" value={f.password} onInput={set('password')} />
        <ErrorBox error={a.error} />
        <button type="submit" class="primary" disabled={a.busy}>
          Register
        </button>
      </form>
      <p>
        Already registered? <a href={`/login${location.search}`}>Sign in</a>
      </p>
    </main>
  );
}
