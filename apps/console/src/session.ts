// The provisioning key lives in memory; in sessionStorage only when the user ticks "Remember in this
// tab". Never a cookie, never localStorage, never logged.
const STORAGE_NAME = 'gateway-console-key';

let current: string | undefined = readRemembered();

function readRemembered(): string | undefined {
  try {
    return sessionStorage.getItem(STORAGE_NAME) ?? undefined;
  } catch {
    return undefined;
  }
}

export function sessionKey(): string | undefined {
  return current;
}

export function signIn(key: string, remember: boolean): void {
  current = key;
  try {
    if (remember) sessionStorage.setItem(STORAGE_NAME, key);
    else sessionStorage.removeItem(STORAGE_NAME);
  } catch {
    // Storage unavailable (private mode): memory only.
  }
}

export function signOut(): void {
  current = undefined;
  try {
    sessionStorage.removeItem(STORAGE_NAME);
  } catch {
    // nothing stored
  }
}
