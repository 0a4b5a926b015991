/*
 * A browser-like HTTP client for sign-in tests: fetch with manual redirects and a cookie jar. Like a
 * browser it keeps cookies per host (not per port), drops one whose Max-Age is 0, sends the jar's
 * cookies on every request to that host, and follows 30x redirects with GET. It honours neither Secure
 * nor SameSite (the tests that need those attributes read the Set-Cookie header itself).
 */

export interface BrowserAnswer {
  status: number;
  url: string;
  headers: Headers;
  text: string;
  /** Every URL requested, in order (redirects included). */
  visited: string[];
}

export interface BrowserRequest {
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  /** Stop at a redirect whose target this answers true for: the target is listed last in `visited` but not requested. */
  stopBefore?: (url: URL) => boolean;
}

const REDIRECTS_MAX = 20;

export class CookieBrowser {
  /** host → cookie name → value */
  private readonly jar = new Map<string, Map<string, string>>();

  cookies(host: string): Map<string, string> {
    let cookies = this.jar.get(host);
    if (!cookies) {
      cookies = new Map();
      this.jar.set(host, cookies);
    }
    return cookies;
  }

  cookie(url: string, name: string): string | undefined {
    return this.cookies(new URL(url).hostname).get(name);
  }

  setCookie(url: string, name: string, value: string): void {
    this.cookies(new URL(url).hostname).set(name, value);
  }

  deleteCookie(url: string, name: string): void {
    this.cookies(new URL(url).hostname).delete(name);
  }

  private remember(url: URL, headers: Headers): void {
    const cookies = this.cookies(url.hostname);
    for (const line of headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(';');
      const equals = (pair ?? '').indexOf('=');
      if (equals <= 0) continue;
      const name = pair!.slice(0, equals).trim();
      const value = pair!.slice(equals + 1).trim();
      const expired = attributes.some((attribute) => {
        const [key, raw] = attribute.split('=').map((part) => part.trim());
        if (key?.toLowerCase() === 'max-age') return Number(raw) <= 0;
        if (key?.toLowerCase() === 'expires') return Date.parse(raw ?? '') <= Date.now();
        return false;
      });
      if (expired || value === '') cookies.delete(name);
      else cookies.set(name, value);
    }
  }

  async fetch(target: string, request: BrowserRequest = {}): Promise<BrowserAnswer> {
    let url = new URL(target);
    let method = request.method ?? 'GET';
    let body = request.body;
    let headers = { ...request.headers };
    const visited: string[] = [];
    for (let hop = 0; hop <= REDIRECTS_MAX; hop++) {
      visited.push(url.href);
      const cookies = [...this.cookies(url.hostname)].map(([name, value]) => `${name}=${value}`).join('; ');
      const response = await fetch(url, {
        method,
        redirect: 'manual',
        headers: { ...headers, ...(cookies === '' ? {} : { cookie: cookies }) },
        ...(body === undefined ? {} : { body }),
      });
      this.remember(url, response.headers);
      const location = response.headers.get('location');
      if (response.status >= 300 && response.status < 400 && location !== null) {
        const next = new URL(location, url);
        await response.arrayBuffer();
        if (request.stopBefore?.(next)) {
          visited.push(next.href);
          return { status: response.status, url: url.href, headers: response.headers, text: '', visited };
        }
        url = next;
        method = 'GET';
        body = undefined;
        headers = {};
        continue;
      }
      return { status: response.status, url: url.href, headers: response.headers, text: await response.text(), visited };
    }
    throw new Error(`more than ${REDIRECTS_MAX} redirects from ${target}`);
  }
}
