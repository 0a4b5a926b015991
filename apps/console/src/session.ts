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
