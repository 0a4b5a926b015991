/*
 * Who may do what on the account and operator routes: ONE table of role × action (docs/governance.md
 * "Sign-in and roles"). The edge checks every /v1/account/*, /v1/generation and /v1/admin/* route
 * against it, the auth service refuses a session with a role not named here, and the console is told
 * which actions its session may take (GET /v1/auth/session answers them from this table), so a button
 * and its route can never disagree.
 *
 * Machine credentials map onto the same table: a provisioning key acts as `owner` of its account, the
 * operator's admin token as `operator`. A signed-in person gets the role their identity provider's
 * group is mapped to.
 */

/** Roles inside one account, strongest first. */
export const ACCOUNT_ROLES = ['owner', 'admin', 'billing', 'viewer'] as const;
export type AccountRole = (typeof ACCOUNT_ROLES)[number];

/** Every role: the account roles and the operator, who belongs to no account and sees the admin view. */
export const ROLES = [...ACCOUNT_ROLES, 'operator'] as const;
export type Role = (typeof ROLES)[number];

/** Every action a route or a console view performs. */
export const ACTIONS = [
  'balance.read',
  'activity.read',
  'generations.read',
  'keys.read',
  'keys.write',
  'budgets.read',
  'budgets.write',
  'audit.read',
  'webhooks.read',
  'webhooks.write',
  'members.read',
  'members.write',
  'admin.providers.read',
  'admin.latency.read',
  'admin.accounts.read',
  'admin.credits.write',
  'admin.audit.read',
] as const;
export type Action = (typeof ACTIONS)[number];

const ACCOUNT_READS = ['balance.read', 'activity.read', 'generations.read', 'keys.read', 'budgets.read'] as const satisfies readonly Action[];
/** What changes the account's keys and spend controls, and the record of those changes (the audit log). */
const ACCOUNT_ADMINISTRATION = ['keys.write', 'budgets.write', 'audit.read', 'webhooks.read', 'webhooks.write'] as const satisfies readonly Action[];
/**
 * Who belongs to the account and with which role. Read and changed by owner and admin only: the list
 * names people (emails) that billing and viewers have no need to see. An admin may change members but
 * never grant `owner` nor touch an owner (the auth service refuses those, knowing the member's role).
 */
const MEMBERSHIP = ['members.read', 'members.write'] as const satisfies readonly Action[];
const OPERATOR_ACTIONS = ['admin.providers.read', 'admin.latency.read', 'admin.accounts.read', 'admin.credits.write', 'admin.audit.read'] as const satisfies readonly Action[];

/**
 * THE table. `owner` and `admin` alone change keys, budgets, webhooks and members and read the audit log;
 * they differ in what the auth service checks per member (an admin grants no `owner` and leaves owners be);
 * `billing` sees spend (balance, activity, generations, each key's usage, budgets) and the webhook endpoints
 * and changes nothing; `viewer` reads the same and
 * changes nothing; the operator acts on the admin routes only and reads no
 * account's data through the account routes (it has the admin view's aggregate instead).
 */
export const ROLE_ACTIONS: Readonly<Record<Role, ReadonlySet<Action>>> = {
  owner: new Set<Action>([...ACCOUNT_READS, ...ACCOUNT_ADMINISTRATION, ...MEMBERSHIP]),
  admin: new Set<Action>([...ACCOUNT_READS, ...ACCOUNT_ADMINISTRATION, ...MEMBERSHIP]),
  // Billing follows whether the budget alerts reached their receivers. The viewer does not see the
  // webhook endpoints: a receiver's URL often carries a token of its own.
  billing: new Set<Action>([...ACCOUNT_READS, 'webhooks.read']),
  viewer: new Set<Action>(ACCOUNT_READS),
  operator: new Set<Action>(OPERATOR_ACTIONS),
};

export function isRole(value: string): value is Role {
  return (ROLES as readonly string[]).includes(value);
}

export function isAccountRole(value: string): value is AccountRole {
  return (ACCOUNT_ROLES as readonly string[]).includes(value);
}

export function roleMay(role: Role, action: Action): boolean {
  return ROLE_ACTIONS[role].has(action);
}

/** The actions a role may take, in the table's order (what the console is told). */
/** `a` is stronger than `b` (owner > admin > billing > viewer). */
export function strongerAccountRole(a: AccountRole, b: AccountRole): AccountRole {
  return ACCOUNT_ROLES.indexOf(a) <= ACCOUNT_ROLES.indexOf(b) ? a : b;
}

export function actionsOf(role: Role): Action[] {
  return ACTIONS.filter((action) => ROLE_ACTIONS[role].has(action));
}
