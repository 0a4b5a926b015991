import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider from 'oidc-provider';

/*
 * A real OpenID provider (the `oidc-provider` package, a certified implementation), started in-process on
 * loopback for sign-in tests: discovery, JWKS, the authorization code flow with PKCE (required), signed
 * ID tokens. Its people are the test's: each has an id, an email and groups (the `groups` claim, in the ID
 * token). The login page is a tiny HTML form a browser-like client posts a person's id to; consent is
 * granted for the configured client, as a company IdP does for its own applications.
 */

export interface IssuerPerson {
  id: string;
  email: string;
  groups: unknown;
  /** The `email_verified` claim (default true: the company's IdP vouches for its own addresses). */
  emailVerified?: boolean;
}

export interface IssuerClient {
  clientId: string;
  clientSecret: string;
  redirectUri: string;
}

export interface TestOidcIssuer {
  /** http://127.0.0.1:<port> */
  issuer: string;
  client: IssuerClient;
  /** Another application of the same IdP, registered with the same redirect URI (tests of a token meant for it). */
  otherClient: IssuerClient;
  /**
   * When set, the token endpoint's JSON answers pass through it (a token swapped on the way: the tests of a
   * wrong audience). The provider itself is untouched.
   */
  rewriteTokenAnswer: ((answer: Record<string, unknown>) => Record<string, unknown>) | undefined;
  /** Adds or replaces a person the login form accepts. */
  addPerson(person: IssuerPerson): void;
  /** Every token endpoint answer's status, in order (a replayed code shows up as a 400 here). */
  tokenStatuses: number[];
  stop(): Promise<void>;
}

const formOf = async (request: IncomingMessage): Promise<URLSearchParams> => {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > 16 * 1024) throw new Error('login form too large');
    chunks.push(chunk as Buffer);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
};

export async function startOidcIssuer(options: { redirectUri: string; clientId?: string; idTokenTtlSeconds?: number }): Promise<TestOidcIssuer> {
  const people = new Map<string, IssuerPerson>();
  const tokenStatuses: number[] = [];
  let handler: ((request: IncomingMessage, response: ServerResponse) => void) | undefined;
  const server: Server = createServer((request, response) => {
    if (handler) handler(request, response);
    else response.writeHead(503).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const client: IssuerClient = {
    clientId: options.clientId ?? 'gateway-console',
    clientSecret: randomBytes(24).toString('base64url'),
    redirectUri: options.redirectUri,
  };
  const otherClient: IssuerClient = { clientId: 'other-app', clientSecret: randomBytes(24).toString('base64url'), redirectUri: options.redirectUri };
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key-1', use: 'sig', alg: 'RS256' };

  const provider = new Provider(issuer, {
    clients: [client, otherClient].map((registered) => ({
      client_id: registered.clientId,
      client_secret: registered.clientSecret,
      redirect_uris: [registered.redirectUri],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    })),
    // PKCE on every code, as the gateway always sends it: a request without it would be refused.
    pkce: { required: () => true },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'], profile: ['name'] },
    scopes: ['openid', 'email', 'profile', 'groups'],
    // Scope claims in the ID token itself (the gateway reads groups from the ID token it validated).
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: false } },
    jwks: { keys: [signingKey as never] },
    cookies: { keys: [randomBytes(16).toString('hex')] },
    ttl: { IdToken: options.idTokenTtlSeconds ?? 3600, AuthorizationCode: 60, Session: 3600, Interaction: 600, Grant: 3600, AccessToken: 600 },
    findAccount: async (_context, id) => {
      const person = people.get(id);
      if (!person) return undefined;
      return { accountId: id, claims: async () => ({ sub: id, email: person.email, email_verified: person.emailVerified ?? true, groups: person.groups as never }) };
    },
    // The company's own application: consent is implied (no consent screen).
    loadExistingGrant: async (context) => {
      const grant = new context.oidc.provider.Grant({ clientId: context.oidc.client!.clientId, accountId: context.oidc.session!.accountId! });
      grant.addOIDCScope('openid email profile groups');
      grant.addOIDCClaims(['email', 'email_verified', 'groups']);
      await grant.save();
      return grant;
    },
  });
  provider.on('grant.success', () => tokenStatuses.push(200));
  provider.on('grant.error', () => tokenStatuses.push(400));
  const callback = provider.callback();

  const running: TestOidcIssuer = {
    issuer,
    client,
    otherClient,
    rewriteTokenAnswer: undefined,
    tokenStatuses,
    addPerson: (person) => people.set(person.id, person),
    stop: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };

  handler = (request, response) => {
    const url = new URL(request.url ?? '/', issuer);
    const rewrite = running.rewriteTokenAnswer;
    if (url.pathname === '/token' && rewrite !== undefined) {
      // The provider answers with one end(body) after setting its headers: the body is swapped there.
      const end = response.end.bind(response) as (chunk?: unknown) => ServerResponse;
      (response as { end: (chunk?: unknown) => ServerResponse }).end = (chunk?: unknown) => {
        if (chunk === undefined || response.statusCode !== 200) return end(chunk);
        const swapped = JSON.stringify(rewrite(JSON.parse(Buffer.from(chunk as Buffer | string).toString('utf8')) as Record<string, unknown>));
        response.setHeader('content-length', Buffer.byteLength(swapped));
        return end(swapped);
      };
    }
    const interaction = /^\/interaction\/([A-Za-z0-9_-]+)(\/login)?$/.exec(url.pathname);
    if (!interaction) {
      callback(request, response);
      return;
    }
    void (async () => {
      try {
        const details = await provider.interactionDetails(request, response);
        if (interaction[2] === undefined) {
          response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
          response.end(`<form method="post" action="/interaction/${details.uid}/login"><input name="login"><button>Sign in</button></form>`);
          return;
        }
        const login = (await formOf(request)).get('login') ?? '';
        if (!people.has(login)) {
          response.writeHead(401, { 'content-type': 'text/plain' }).end('unknown person');
          return;
        }
        await provider.interactionFinished(request, response, { login: { accountId: login } }, { mergeWithLastSubmission: false });
      } catch (error) {
        response.writeHead(400, { 'content-type': 'text/plain' }).end(String(error));
      }
    })();
  };

  return running;
}
