/** Device pairing: the user types the code `gantry login` shows; the device then receives its credentials. */
import { useState } from 'preact/hooks';
import { api, useApp } from '../session.ts';
import { ErrorBox, useAction } from '../ui.tsx';

export function PairPage() {
  const { me, teamId } = useApp();
  const [code, setCode] = useState(new URLSearchParams(location.search).get('code') ?? '');
  const [done, setDone] = useState<string | null>(null);
  const a = useAction();
  const team = me.team_list.find((t) => t.id === teamId)?.display_name ?? 'this team';
  const submit = (ev: Event): void => {
    ev.preventDefault();
    const c = code.trim();
    void a.run(() => api.POST('/desktop/pair/confirm', { body: { user_code: c } })).then((ok) => {
      if (!ok) return;
      setDone(c.toUpperCase());
      setCode('');
    });
  };
  return (
    <>
      <h1>Pair a device</h1>
      <p>
        Run <code>gantry login</code> on the device and type the code it shows. The device gets a device credential acting as you in <strong>{team}</strong>, and an agent
        credential for the team.
      </p>
      <form onSubmit={submit} class="inline">
        <div class="field">
          <label for="pair-code">Pairing code</label>
          <input id="pair-code" required autocomplete="off" autocapitalize="characters" spellcheck={false} placeholder="ABCD-2345" maxLength={20} value={code} onInput={(e) => setCode(e.currentTarget.value)} />
        </div>
        <button type="submit" class="primary" disabled={a.busy}>
          Confirm pairing
        </button>
      </form>
      <ErrorBox error={a.error} />
      {done ? (
        <p class="success" role="status">
          Device {done} is paired with {team}. It finishes signing in on its own.
        </p>
      ) : null}
    </>
  );
}
