import { accountEventOutboxMigration, auditLogMigration, outboxInsertSql, sql, type AuditTables, type Kysely } from '@gateway/platform/db';
import type { Generated, Migration } from 'kysely';

export const AUTH_SCHEMA = 'auth';

export interface AccountsTable {
  id: string;
  name: string;
  tier: string;
  created_at: Generated<Date>;
  /** Caller-chosen key that makes CreateAccount retry-safe; null when none was given. */
  idempotency_key: string | null;
  /** SHA-256 of the normalised request, so a reused idempotency key with another body is refused. */
  request_fingerprint: string | null;
}

export interface ProvisioningKeysTable {
  id: string;
  account_id: string;
  name: string;
  key_hash: string;
  label: string;
  created_at: Generated<Date>;
  revoked_at: Date | null;
}

export interface ApiKeysTable {
  /** Insertion order; the list cursor, because timestamps read back at millisecond precision tie. */
  seq: Generated<bigint>;
  id: string;
  account_id: string;
  name: string;
  key_hash: string;
  label: string;
  disabled: Generated<boolean>;
  /** Credits as a Postgres numeric, read back as text; null = no limit. */
  credit_limit: string | null;
  /** Empty string = the key has none (the service default applies). */
  default_routing_strategy: Generated<string>;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
  deleted_at: Date | null;
  /** Window of credit_limit (UTC midnight boundaries, weeks from Monday); null: the limit bounds lifetime spend. */
  limit_reset: Generated<LimitReset | null>;
  /** From this instant the key is refused (key_expired); null: never. */
  expires_at: Generated<Date | null>;
  /** When the expiry sweeper wrote this expiry's api_key.expired event; null: not yet (or expires_at moved since). */
  expiry_announced_at: Generated<Date | null>;
}

/** An event for the account's webhooks, relayed to the ledger (@gateway/platform/db account-event-outbox). */
export interface AccountEventOutboxTable {
  id: Generated<bigint>;
  event_id: string;
  account_id: string;
  type: string;
  data: unknown;
  created_at: Generated<Date>;
}

export type LimitReset = 'daily' | 'weekly' | 'monthly';

/** A sign-in session (docs/governance.md "Sign-in and roles"): the token itself is never stored. */
export interface SessionsTable {
  id: string;
  /** SHA-256 (hex) of the session token, which is 32 random bytes: a leaked table yields no session. */
  token_hash: string;
  /** Null for the operator role. */
  account_id: string | null;
  role: string;
  issuer: string;
  subject: string;
  display_name: string;
  created_at: Generated<Date>;
  expires_at: Date;
  revoked_at: Date | null;
}

/**
 * A member of an account (docs/governance.md "Members"): a person named by the identity provider's issuer
 * and subject, or an email invitation that the person's first sign-in with that verified email binds.
 */
export interface MembersTable {
  id: string;
  account_id: string;
  role: string;
  /** Null until an email invitation is bound (then both are set, for good). */
  issuer: string | null;
  subject: string | null;
  /** Lowercased; null for a member added by issuer and subject. */
  email: string | null;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
  /** When an invitation was bound at the person's first sign-in. */
  joined_at: Date | null;
}

export interface AuthDatabase extends AuditTables {
  sessions: SessionsTable;
  members: MembersTable;
  accounts: AccountsTable;
  provisioning_keys: ProvisioningKeysTable;
  api_keys: ApiKeysTable;
  account_event_outbox: AccountEventOutboxTable;
}

/** What a key event tells about the key: never its hash (nor its plaintext, which no table holds). */
const keyEventData = (at: string, value: string) =>
  `jsonb_build_object('key_id', new.id, 'name', new.name, 'label', new.label, '${at}', to_jsonb(${value}))`;

export const authMigrations: Record<string, Migration> = {
  '0001_init': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table auth.accounts (
          id text primary key,
          name text not null check (char_length(name) between 1 and 200),
          tier text not null check (tier in ('free', 'tier-1', 'tier-2', 'tier-3', 'tier-4')),
          created_at timestamptz not null default now(),
          idempotency_key text unique,
          request_fingerprint text,
          check ((idempotency_key is null) = (request_fingerprint is null))
        )`.execute(db);
      await sql`
        create table auth.provisioning_keys (
          id text primary key,
          account_id text not null references auth.accounts (id),
          name text not null,
          key_hash text not null unique,
          label text not null,
          created_at timestamptz not null default now(),
          revoked_at timestamptz
        )`.execute(db);
      await sql`create index provisioning_keys_account on auth.provisioning_keys (account_id)`.execute(db);
      await sql`
        create table auth.api_keys (
          seq bigint generated always as identity unique,
          id text primary key,
          account_id text not null references auth.accounts (id),
          name text not null check (char_length(name) between 1 and 200),
          key_hash text not null unique,
          label text not null,
          disabled boolean not null default false,
          credit_limit numeric check (credit_limit >= 0),
          default_routing_strategy text not null default ''
            check (default_routing_strategy in ('', 'reliability', 'balanced', 'latency', 'throughput', 'cache')),
          created_at timestamptz not null default now(),
          updated_at timestamptz not null default now(),
          deleted_at timestamptz
        )`.execute(db);
      // Serves the account's newest-first listing of live keys.
      await sql`create index api_keys_account_live on auth.api_keys (account_id, seq desc) where deleted_at is null`.execute(db);
    },
  },
  // Keys that reset and expire (OpenRouter's limit_reset and expires_at): nullable, so existing keys keep
  // a lifetime limit and never expire.
  '0002_key_limit_reset_and_expiry': {
    up: async (db: Kysely<any>) => {
      await sql`
        alter table auth.api_keys
          add column limit_reset text check (limit_reset in ('daily', 'weekly', 'monthly')),
          add column expires_at timestamptz`.execute(db);
    },
  },
  // Sign-in sessions (users who sign in with the identity provider): hashed tokens with expiry and revocation.
  '0003_sign_in_sessions': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table auth.sessions (
          id text primary key,
          token_hash text not null unique,
          account_id text references auth.accounts (id),
          role text not null check (role in ('owner', 'admin', 'billing', 'viewer', 'operator')),
          issuer text not null check (char_length(issuer) between 1 and 1000),
          subject text not null check (char_length(subject) between 1 and 255),
          display_name text not null check (char_length(display_name) <= 200),
          created_at timestamptz not null default now(),
          expires_at timestamptz not null,
          revoked_at timestamptz,
          check ((role = 'operator') = (account_id is null))
        )`.execute(db);
      // Serves the bound on one person's live sessions (oldest revoked first).
      await sql`create index sessions_subject_live on auth.sessions (issuer, subject, created_at) where revoked_at is null`.execute(db);
      await sql`create index sessions_expiry on auth.sessions (expires_at)`.execute(db);
    },
  },
  // The audit log's chain (docs/governance.md): written in the transaction of each key and account change.
  '0004_audit_log': auditLogMigration('auth'),
  // Members of an account beside the identity provider's groups (docs/governance.md "Members").
  '0005_members': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table auth.members (
          id text primary key,
          account_id text not null references auth.accounts (id),
          role text not null check (role in ('owner', 'admin', 'billing', 'viewer')),
          issuer text check (char_length(issuer) between 1 and 1000),
          subject text check (char_length(subject) between 1 and 255),
          email text check (char_length(email) between 3 and 320 and email = lower(email)),
          created_at timestamptz not null default now(),
          updated_at timestamptz not null default now(),
          joined_at timestamptz,
          check ((issuer is null) = (subject is null)),
          check (issuer is not null or email is not null)
        )`.execute(db);
      // One membership per person and per invited email in an account.
      await sql`create unique index members_account_identity on auth.members (account_id, issuer, subject) where issuer is not null`.execute(db);
      await sql`create unique index members_account_email on auth.members (account_id, email) where email is not null`.execute(db);
      // Sign-in: a person's memberships, and the invitations their verified email binds.
      await sql`create index members_identity on auth.members (issuer, subject) where issuer is not null`.execute(db);
      await sql`create index members_unbound_email on auth.members (email) where issuer is null`.execute(db);
    },
  },
  // Webhook events of keys (docs/governance.md "Webhooks"): the outbox, and a trigger writing to it in the
  // transaction of each change, whatever code path made it.
  '0006_key_events': {
    up: async (db: Kysely<any>) => {
      await accountEventOutboxMigration().up(db);
      await sql`alter table auth.api_keys add column expiry_announced_at timestamptz`.execute(db);
      // Keys already expired before events existed are not announced now.
      await sql`update auth.api_keys set expiry_announced_at = now() where expires_at <= now()`.execute(db);
      // The expiry sweeper's queue: live keys whose expiry is set and not yet announced.
      await sql`create index api_keys_expiry_due on auth.api_keys (expires_at) where expiry_announced_at is null and expires_at is not null and deleted_at is null`.execute(db);
      await sql.raw(`
        create function auth.api_keys_to_account_events() returns trigger language plpgsql as $$
        begin
          if tg_op = 'INSERT' then
            ${outboxInsertSql('auth', 'new.account_id', "'api_key.created'", keyEventData('created_at', 'new.created_at'))}
            return null;
          end if;
          if new.deleted_at is not null and old.deleted_at is null then
            ${outboxInsertSql('auth', 'new.account_id', "'api_key.deleted'", keyEventData('deleted_at', 'new.deleted_at'))}
          elsif new.deleted_at is null and new.disabled and not old.disabled then
            ${outboxInsertSql('auth', 'new.account_id', "'api_key.disabled'", keyEventData('disabled_at', 'new.updated_at'))}
          end if;
          if new.expiry_announced_at is not null and old.expiry_announced_at is null then
            ${outboxInsertSql('auth', 'new.account_id', "'api_key.expired'", keyEventData('expired_at', 'new.expires_at'))}
          end if;
          return null;
        end $$`).execute(db);
      await sql`
        create trigger api_keys_account_events after insert or update on auth.api_keys
        for each row execute function auth.api_keys_to_account_events()`.execute(db);
    },
  },
};
