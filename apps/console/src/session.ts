// Two credentials, each signed in on its own: the account's provisioning key (Account, Requests, Keys)
// and the operator's admin token (Operator). Each lives in memory; in sessionStorage (under its own
// name) only when the user ticks "Remember in this tab". Never a cookie, never localStorage, never logged.

/** One credential held by the page. */
export class Credential {
  private current: string | undefined;

  constructor(private readonly storageName: string) {
    this.current = this.readRemembered();
  }

  private readRemembered(): string | undefined {
    try {
      return sessionStorage.getItem(this.storageName) ?? undefined;
    } catch {
      return undefined;
    }
  }

  value(): string | undefined {
    return this.current;
  }

  signIn(secret: string, remember: boolean): void {
    this.current = secret;
    try {
      if (remember) sessionStorage.setItem(this.storageName, secret);
      else sessionStorage.removeItem(this.storageName);
    } catch {
      // Storage unavailable (private mode): memory only.
    }
  }

  signOut(): void {
    this.current = undefined;
    try {
      sessionStorage.removeItem(this.storageName);
    } catch {
      // nothing stored
    }
  }
}

export const provisioningKey = new Credential('gateway-console-key');
export const adminToken = new Credential('gateway-console-admin-token');
/** An API key of the account, for the Files and Batches views (the OpenAI Files and Batch routes take no other credential). */
export const apiKey = new Credential('gateway-console-api-key');

/**
 * A person signed in with the company's identity provider (docs/governance.md "Sign-in and roles"): the
 * session itself is an HttpOnly cookie the page never sees; GET /v1/auth/session tells the page who it is,
 * which actions the role table gives them (buttons follow it; the routes check it again) and the CSRF
 * token every write echoes.
 */
export interface IdentitySession {
  account_id: string | null;
  role: string;
  display_name: string;
  actions: string[];
  csrf_token: string;
  expires_at: number;
}

let identity: IdentitySession | undefined;

export const identitySession = {
  current: (): IdentitySession | undefined => identity,

  /** Asks the gateway whether this browser is signed in; undefined when not (or sign-in is not configured). */
  async load(): Promise<IdentitySession | undefined> {
    try {
      const response = await fetch('/v1/auth/session', { credentials: 'same-origin' });
      identity = response.ok ? ((await response.json()) as IdentitySession) : undefined;
    } catch {
      identity = undefined;
    }
    return identity;
  },

  async signOut(): Promise<void> {
    const csrf = identity?.csrf_token;
    identity = undefined;
    if (csrf === undefined) return;
    await fetch('/v1/auth/logout', { method: 'POST', credentials: 'same-origin', headers: { 'x-csrf-token': csrf } }).catch(() => undefined);
  },
};

/**
 * Whether the page offers an action: a provisioning key is its account's owner (every account action);
 * a signed-in person has their role's actions.
 */
export function mayDo(action: string): boolean {
  if (provisioningKey.value() !== undefined) return !action.startsWith('admin.');
  return identity?.actions.includes(action) ?? false;
}
