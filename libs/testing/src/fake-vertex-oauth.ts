import { createPublicKey, generateKeyPairSync, randomBytes, verify, type KeyObject } from 'node:crypto';

// The OAuth side of the fake Vertex upstream: test service accounts and Google's signed-JWT grant
// (RFC 7523) as the token endpoint checks it.

export const CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform';
export const JWT_BEARER_GRANT = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
/** Google's token endpoint: the audience google-auth-library signs into its grants by default. */
const GOOGLE_TOKEN_URL = 'https://oauth2.googleapis.com/token';
/** Google refuses a grant JWT that lives longer than an hour. */
const MAX_ASSERTION_LIFETIME_SECONDS = 3_600;
/** Clock skew tolerated on iat / exp. */
const SKEW_SECONDS = 300;

export interface TestServiceAccount {
  clientEmail: string;
  privateKeyId: string;
  /** PKCS#8 PEM, as in a key file Google issues. */
  privateKey: string;
  /** SPKI PEM of the same key pair (what Google keeps). */
  publicKey: string;
  /** The JSON key file's content, its token_uri pointing where the caller says. */
  keyFile(tokenUri: string, projectId?: string): string;
}

/** A fresh RSA-2048 service account (node:crypto), as Google's key files describe one. */
export function createTestServiceAccount(clientEmail = 'gateway-test@fake-project.iam.gserviceaccount.com'): TestServiceAccount {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  });
  const privateKeyId = randomBytes(20).toString('hex');
  return {
    clientEmail,
    privateKeyId,
    privateKey,
    publicKey,
    keyFile: (tokenUri, projectId = 'fake-project') =>
      JSON.stringify({
        type: 'service_account',
        project_id: projectId,
        private_key_id: privateKeyId,
        private_key: privateKey,
        client_email: clientEmail,
        client_id: '100000000000000000001',
        auth_uri: 'https://accounts.google.com/o/oauth2/auth',
        token_uri: tokenUri,
        universe_domain: 'googleapis.com',
      }, null, 2),
  };
}

export interface IssuedToken {
  clientEmail: string;
  /** Epoch ms. */
  expiresAt: number;
}

export interface GrantOutcome {
  status: number;
  body: Record<string, unknown>;
}

export interface OAuthGrantCheckerOptions {
  /** client_email → SPKI PEM public key. */
  accounts: ReadonlyMap<string, string>;
  /** This endpoint's own URL (the file's token_uri): an accepted audience besides Google's. */
  tokenUri: string;
  /** Lifetime of the tokens given out. */
  tokenLifetimeSeconds(): number;
}

const invalidGrant = (description: string): GrantOutcome => ({ status: 400, body: { error: 'invalid_grant', error_description: description } });

function decodeSegment(segment: string): any {
  return JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
}

/**
 * Google's token endpoint for service accounts: a form body `grant_type=…jwt-bearer&assertion=<JWT>`,
 * the JWT signed RS256 with the account's private key, its claims `iss` (the account), `aud` (the token
 * endpoint), `scope`, `iat` and `exp` (at most an hour apart). Refusals in Google's words.
 */
export function oauthGrantChecker(options: OAuthGrantCheckerOptions) {
  const keys = new Map<string, KeyObject>();
  for (const [email, pem] of options.accounts) keys.set(email, createPublicKey(pem));
  const issued = new Map<string, IssuedToken>();

  function grant(contentType: string, raw: string): GrantOutcome {
    if (!/^application\/x-www-form-urlencoded/i.test(contentType)) {
      return { status: 400, body: { error: 'invalid_request', error_description: 'Bad Request' } };
    }
    const form = new URLSearchParams(raw);
    const grantType = form.get('grant_type');
    if (grantType !== JWT_BEARER_GRANT) {
      return { status: 400, body: { error: 'unsupported_grant_type', error_description: `Invalid grant_type: ${grantType ?? ''}` } };
    }
    const assertion = form.get('assertion') ?? '';
    const segments = assertion.split('.');
    if (segments.length !== 3) return invalidGrant('Invalid JWT: the assertion is not a signed JWT.');
    let header: any, claims: any;
    try {
      header = decodeSegment(segments[0]!);
      claims = decodeSegment(segments[1]!);
    } catch {
      return invalidGrant('Invalid JWT: the assertion is not a signed JWT.');
    }
    if (header?.alg !== 'RS256') return invalidGrant('Invalid JWT Signature.');
    const key = typeof claims?.iss === 'string' ? keys.get(claims.iss) : undefined;
    if (!key) return invalidGrant('Invalid grant: account not found');
    const signed = Buffer.from(`${segments[0]}.${segments[1]}`);
    if (!verify('RSA-SHA256', signed, key, Buffer.from(segments[2]!, 'base64url'))) return invalidGrant('Invalid JWT Signature.');
    if (claims.aud !== options.tokenUri && claims.aud !== GOOGLE_TOKEN_URL) return invalidGrant('Invalid JWT: Failed audience check.');
    const now = Math.floor(Date.now() / 1000);
    const { iat, exp } = claims;
    if (typeof iat !== 'number' || typeof exp !== 'number' || iat > now + SKEW_SECONDS || exp < now - SKEW_SECONDS || exp - iat > MAX_ASSERTION_LIFETIME_SECONDS || exp <= iat) {
      return invalidGrant('Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.');
    }
    const scopes = typeof claims.scope === 'string' ? claims.scope.split(' ') : [];
    if (!scopes.includes(CLOUD_PLATFORM_SCOPE)) {
      return { status: 400, body: { error: 'invalid_scope', error_description: 'Invalid OAuth scope or ID token audience provided.' } };
    }
    const lifetime = options.tokenLifetimeSeconds();
    const accessToken = `ya29.fake-${randomBytes(24).toString('base64url')}`;
    issued.set(accessToken, { clientEmail: claims.iss, expiresAt: Date.now() + lifetime * 1000 });
    return { status: 200, body: { access_token: accessToken, expires_in: lifetime, token_type: 'Bearer' } };
  }

  /** The account a bearer token was issued to, while it is valid. */
  function holder(authorization: string | undefined): IssuedToken | undefined {
    const token = /^Bearer (\S+)$/.exec(authorization ?? '')?.[1];
    const entry = token ? issued.get(token) : undefined;
    return entry && entry.expiresAt > Date.now() ? entry : undefined;
  }

  return { grant, holder, revokeAll: () => issued.clear() };
}
