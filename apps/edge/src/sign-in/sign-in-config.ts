import { z } from 'zod';
import { ACCOUNT_ROLES, type AccountRole } from '@gateway/platform';

/*
 * Sign-in with the company's identity provider (docs/governance.md "Sign-in and roles"): which issuer,
 * which client, and how an IdP group maps to an account and a role. Read from the edge's environment
 * (EDGE_OIDC_*, main.ts) or given to startEdge by a composition root.
 */

/** One IdP group's membership: the account it acts on and the role it has there. */
export interface GroupMembership {
  group: string;
  accountId: string;
  role: AccountRole;
}

export interface OidcSignInOptions {
  /** The issuer (its discovery document is `<issuer>/.well-known/openid-configuration`). https, or http on loopback only. */
  issuer: string;
  clientId: string;
  /** Confidential clients: sent with client_secret_basic. Unset: a public client (PKCE alone). */
  clientSecret?: string;
  /** This edge's callback, registered with the IdP: `https://gateway.example.com/v1/auth/callback`. */
  redirectUri: string;
  /** Default `openid email profile groups`. */
  scopes?: string;
  /** The ID token claim that lists the person's groups. Default `groups`. */
  groupsClaim?: string;
  memberships: readonly GroupMembership[];
  /** IdP groups whose members sign in as operators (the admin view). */
  operatorGroups?: readonly string[];
  /** Session lifetime, 60..43200 s. Default 3600 (short: a removed person's session ends within the hour). */
  sessionTtlSeconds?: number;
  /** Cookies carry Secure (default true). Off only for plain-http loopback development: refused otherwise. */
  secureCookies?: boolean;
  /** Where a signed-in browser lands. Default `/console/`. A path on this edge only. */
  postLoginPath?: string;
}

export const SIGN_IN_DEFAULTS = {
  scopes: 'openid email profile groups',
  groupsClaim: 'groups',
  sessionTtlSeconds: 3600,
  postLoginPath: '/console/',
} as const;

/** Groups a person may list in their token that the edge looks at; the rest are ignored. */
export const GROUPS_CLAIM_MAX_ENTRIES = 200;
/** Characters of one group name; a longer one matches nothing. */
export const GROUP_NAME_MAX_LENGTH = 256;
const MEMBERSHIPS_MAX = 1_000;

const isLoopbackHost = (hostname: string) => hostname === 'localhost' || hostname === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(hostname);

export function isLoopbackUrl(value: string): boolean {
  return isLoopbackHost(new URL(value).hostname);
}

const membershipPattern = /^([^=,]+)=([^:,]+):([a-z]+)$/;

/**
 * EDGE_OIDC_GROUP_ROLES: `group=account_id:role` pairs separated by commas, e.g.
 * `platform-admins=acc_123:admin,finance=acc_123:billing`. A group may appear once per account.
 */
export function parseGroupRoles(text: string): GroupMembership[] {
  const entries = text.split(',').map((entry) => entry.trim()).filter((entry) => entry !== '');
  if (entries.length > MEMBERSHIPS_MAX) throw new Error(`EDGE_OIDC_GROUP_ROLES: at most ${MEMBERSHIPS_MAX} entries`);
  return entries.map((entry) => {
    const match = membershipPattern.exec(entry);
    if (!match) throw new Error(`EDGE_OIDC_GROUP_ROLES: "${entry}" is not group=account_id:role`);
    const role = match[3] as string;
    if (!(ACCOUNT_ROLES as readonly string[]).includes(role)) throw new Error(`EDGE_OIDC_GROUP_ROLES: "${role}" is not one of ${ACCOUNT_ROLES.join(', ')}`);
    return { group: (match[1] as string).trim(), accountId: (match[2] as string).trim(), role: role as AccountRole };
  });
}

const optionsSchema = z.object({
  issuer: z.url({ protocol: /^https?$/ }),
  clientId: z.string().min(1).max(500),
  clientSecret: z.string().min(1).max(500).optional(),
  redirectUri: z.url({ protocol: /^https?$/ }).refine((value) => new URL(value).search === '' && new URL(value).hash === '', 'must have no query or fragment'),
  scopes: z.string().regex(/(^|\s)openid(\s|$)/, 'must include openid').optional(),
  groupsClaim: z.string().min(1).max(200).optional(),
  memberships: z.array(z.object({ group: z.string().min(1).max(GROUP_NAME_MAX_LENGTH), accountId: z.string().min(1).max(100), role: z.enum(ACCOUNT_ROLES) })).max(MEMBERSHIPS_MAX),
  operatorGroups: z.array(z.string().min(1).max(GROUP_NAME_MAX_LENGTH)).max(MEMBERSHIPS_MAX).optional(),
  sessionTtlSeconds: z.number().int().min(60).max(43_200).optional(),
  secureCookies: z.boolean().optional(),
  postLoginPath: z.string().regex(/^\/(?!\/)[^\s\\]*$/, 'must be a path on this edge').optional(),
});

/** The options, checked: a bad value fails start-up with its name rather than the first sign-in. */
export function checkedSignInOptions(options: OidcSignInOptions): Required<Omit<OidcSignInOptions, 'clientSecret'>> & { clientSecret?: string } {
  const parsed = optionsSchema.safeParse(options);
  if (!parsed.success) throw new Error(`sign-in configuration: ${parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')}`);
  const issuerUrl = new URL(options.issuer);
  if (issuerUrl.protocol === 'http:' && !isLoopbackHost(issuerUrl.hostname)) throw new Error('sign-in configuration: issuer: http is allowed on loopback only');
  const secureCookies = options.secureCookies ?? true;
  if (!secureCookies && !isLoopbackUrl(options.redirectUri)) {
    throw new Error('sign-in configuration: cookies without Secure are allowed only for a loopback redirect URI (plain-http development)');
  }
  const seen = new Set<string>();
  for (const membership of options.memberships) {
    const key = `${membership.group}\u0000${membership.accountId}`;
    if (seen.has(key)) throw new Error(`sign-in configuration: group ${membership.group} is mapped to account ${membership.accountId} twice`);
    seen.add(key);
  }
  return {
    issuer: options.issuer,
    clientId: options.clientId,
    ...(options.clientSecret === undefined ? {} : { clientSecret: options.clientSecret }),
    redirectUri: options.redirectUri,
    scopes: options.scopes ?? SIGN_IN_DEFAULTS.scopes,
    groupsClaim: options.groupsClaim ?? SIGN_IN_DEFAULTS.groupsClaim,
    memberships: options.memberships,
    operatorGroups: options.operatorGroups ?? [],
    sessionTtlSeconds: options.sessionTtlSeconds ?? SIGN_IN_DEFAULTS.sessionTtlSeconds,
    secureCookies,
    postLoginPath: options.postLoginPath ?? SIGN_IN_DEFAULTS.postLoginPath,
  };
}

export type CheckedSignInOptions = ReturnType<typeof checkedSignInOptions>;

const environmentSchema = z.object({
  EDGE_OIDC_ISSUER: z.url().optional(),
  EDGE_OIDC_CLIENT_ID: z.string().min(1).optional(),
  EDGE_OIDC_CLIENT_SECRET: z.string().min(1).optional(),
  EDGE_OIDC_REDIRECT_URI: z.url().optional(),
  EDGE_OIDC_SCOPES: z.string().min(1).optional(),
  EDGE_OIDC_GROUPS_CLAIM: z.string().min(1).optional(),
  EDGE_OIDC_GROUP_ROLES: z.string().default(''),
  EDGE_OIDC_OPERATOR_GROUPS: z.string().default(''),
  EDGE_SESSION_TTL_SECONDS: z.coerce.number().int().min(60).max(43_200).default(SIGN_IN_DEFAULTS.sessionTtlSeconds),
  EDGE_SESSION_COOKIE_SECURE: z.enum(['true', 'false']).default('true'),
  EDGE_OIDC_POST_LOGIN_PATH: z.string().min(1).optional(),
});

/**
 * Sign-in from the environment (docs/governance.md "Sign-in and roles"): on when EDGE_OIDC_ISSUER is set,
 * which then needs EDGE_OIDC_CLIENT_ID and EDGE_OIDC_REDIRECT_URI. Used by the edge's own process and by
 * `npm start`.
 */
export function signInFromEnvironment(environment: Record<string, string | undefined>): OidcSignInOptions | undefined {
  const parsed = environmentSchema.safeParse(environment);
  if (!parsed.success) throw new Error(`sign-in configuration: ${parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')}`);
  const env = parsed.data;
  if (env.EDGE_OIDC_ISSUER === undefined) return undefined;
  if (env.EDGE_OIDC_CLIENT_ID === undefined || env.EDGE_OIDC_REDIRECT_URI === undefined) {
    throw new Error('sign-in configuration: EDGE_OIDC_ISSUER needs EDGE_OIDC_CLIENT_ID and EDGE_OIDC_REDIRECT_URI');
  }
  return {
    issuer: env.EDGE_OIDC_ISSUER,
    clientId: env.EDGE_OIDC_CLIENT_ID,
    ...(env.EDGE_OIDC_CLIENT_SECRET === undefined ? {} : { clientSecret: env.EDGE_OIDC_CLIENT_SECRET }),
    redirectUri: env.EDGE_OIDC_REDIRECT_URI,
    ...(env.EDGE_OIDC_SCOPES === undefined ? {} : { scopes: env.EDGE_OIDC_SCOPES }),
    ...(env.EDGE_OIDC_GROUPS_CLAIM === undefined ? {} : { groupsClaim: env.EDGE_OIDC_GROUPS_CLAIM }),
    memberships: parseGroupRoles(env.EDGE_OIDC_GROUP_ROLES),
    operatorGroups: env.EDGE_OIDC_OPERATOR_GROUPS.split(',').map((group) => group.trim()).filter((group) => group !== ''),
    sessionTtlSeconds: env.EDGE_SESSION_TTL_SECONDS,
    secureCookies: env.EDGE_SESSION_COOKIE_SECURE === 'true',
    ...(env.EDGE_OIDC_POST_LOGIN_PATH === undefined ? {} : { postLoginPath: env.EDGE_OIDC_POST_LOGIN_PATH }),
  };
}
