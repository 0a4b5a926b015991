import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { api, errorText } from '../api.js';
import { provisioningKey, type Credential } from '../session.js';

interface CredentialSignInProps {
  credential: Credential;
  /** A call the credential must pass before it is kept (a refusal is shown in words). */
  check: () => Promise<unknown>;
  onSignedIn: () => void;
  title: string;
  /** The field's id and its label (the name a screen reader announces). */
  fieldId: string;
  label: string;
  children: ComponentChildren;
}

/** Asks for one credential once, checks it with one call, and keeps it as its Credential's rules say. */
export function CredentialSignIn({ credential, check, onSignedIn, title, fieldId, label, children }: CredentialSignInProps) {
  const [secret, setSecret] = useState('');
  const [remember, setRemember] = useState(false);
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    credential.signIn(secret.trim(), remember);
    try {
      await check();
      onSignedIn();
    } catch (failure) {
      credential.signOut();
      setError(errorText(failure));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby={`${fieldId}-title`} class="card narrow">
      <h1 id={`${fieldId}-title`}>{title}</h1>
      <p>{children} It stays in this page's memory unless you tick the box.</p>
      <form onSubmit={submit}>
        <label for={fieldId}>{label}</label>
        <input id={fieldId} type="password" autocomplete="off" spellcheck={false} required value={secret}
          onInput={(event) => setSecret((event.target as HTMLInputElement).value)} />
        <label class="check">
          <input type="checkbox" checked={remember} onChange={(event) => setRemember((event.target as HTMLInputElement).checked)} />
          Remember in this tab
        </label>
        {error && <p role="alert" class="error">{error}</p>}
        <button type="submit" disabled={busy || secret.trim() === ''}>Sign in</button>
      </form>
    </section>
  );
}

/** A link to the identity provider's sign-in (when the gateway is configured for one). */
export function IdentityProviderSignIn({ account }: { account?: string }) {
  return (
    <p class="card narrow">
      <a class="button" href={`/v1/auth/login${account ? `?account=${encodeURIComponent(account)}` : ''}`}>Sign in with your identity provider</a>
    </p>
  );
}

/** The account's sign-in: the identity provider, or the provisioning key checked against the balance route. */
export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  return (
    <>
      <IdentityProviderSignIn />
      <CredentialSignIn credential={provisioningKey} check={api.balance} onSignedIn={onSignedIn} title="Sign in" fieldId="provisioning-key" label="Provisioning key">
        Or use your account's provisioning key (<code>gw-prov-…</code>).
      </CredentialSignIn>
    </>
  );
}
