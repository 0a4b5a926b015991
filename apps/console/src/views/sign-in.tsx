import { useState } from 'preact/hooks';
import { api, errorText } from '../api.js';
import { signIn, signOut } from '../session.js';

/** Asks for the provisioning key once; checks it against the balance route before keeping it. */
export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const [key, setKey] = useState('');
  const [remember, setRemember] = useState(false);
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    signIn(key.trim(), remember);
    try {
      await api.balance();
      onSignedIn();
    } catch (failure) {
      signOut();
      setError(errorText(failure));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby="sign-in-title" class="card narrow">
      <h1 id="sign-in-title">Sign in</h1>
      <p>The console uses your account's provisioning key (<code>gw-prov-…</code>). It stays in this page's memory unless you tick the box.</p>
      <form onSubmit={submit}>
        <label for="provisioning-key">Provisioning key</label>
        <input id="provisioning-key" type="password" autocomplete="off" spellcheck={false} required value={key}
          onInput={(event) => setKey((event.target as HTMLInputElement).value)} />
        <label class="check">
          <input type="checkbox" checked={remember} onChange={(event) => setRemember((event.target as HTMLInputElement).checked)} />
          Remember in this tab
        </label>
        {error && <p role="alert" class="error">{error}</p>}
        <button type="submit" disabled={busy || key.trim() === ''}>Sign in</button>
      </form>
    </section>
  );
}
