/** Sign in and register (public pages). */
import { useState } from 'preact/hooks';
import { api, data, session } from '../session.ts';
import { navigate } from '../router.ts';
import { ErrorBox, useAction } from '../ui.tsx';

async function signIn(email: string, password: string): Promise<void> {
  const t = await data(api.POST('/auth/login', { body: { email_address: email, password } }));
  session.setTokens({ access_token: t.access_token, refresh_token: t.refresh_token });
}

function afterSignIn(): void {
  const next = new URLSearchParams(location.search).get('next');
  navigate(next && next.startsWith('/') && !next.startsWith('//') ? next : '/workflows', true);
}

export function LoginPage() {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const a = useAction();
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
        <button type="submit" class="primary" disabled={a.busy}>
          Sign in
        </button>
      </form>
      <p>
        No account? <a href={`/register${location.search}`}>Register</a>
      </p>
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
