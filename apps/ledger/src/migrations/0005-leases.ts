import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/**
 * Leased budgets (DESIGN §2): a block of reservation capacity one edge replica holds for one
 * (account, key). Its open rest (granted − settled) counts in balances.reserved_pico and
 * key_totals.reserved_pico exactly like an open reservation; a settled charge naming the lease moves
 * min(cost, rest) from reserved to settled, so the charge is not counted twice.
 */
export const leases: Migration = {
  async up(db: Kysely<any>) {
    await sql`
      create table leases (
        lease_id text primary key,
        account_id text not null,
        key_id text not null default '',
        holder text not null default '',
        -- Requests counted in the rate windows for this lease; unused ones are taken back on return.
        limit_group text not null default '',
        granted_requests integer not null default 0,
        minute_window timestamptz,
        day_window timestamptz,
        granted_pico bigint not null check (granted_pico >= 0),
        settled_pico bigint not null default 0,
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        closed_at timestamptz,
        close_reason text check (close_reason in ('returned', 'expired')),
        check (settled_pico >= 0 and settled_pico <= granted_pico),
        check ((closed_at is null) = (close_reason is null))
      )`.execute(db);
    await sql`create index leases_open_expiry on leases (expires_at) where closed_at is null`.execute(db);
    await sql`create index leases_open_account on leases (account_id) where closed_at is null`.execute(db);
  },
};
