import { sql, type Kysely } from '@gateway/platform/db';
import type { Migration } from 'kysely';

/*
 * Webhooks (issue 42 item 4, docs/governance.md "Webhooks").
 *
 * - `webhook_endpoints`: an account's receivers: an URL, the event types it subscribes to, enabled or not,
 *   and its signing secret (`whsec_<base64>`, stored as-is: the gateway must sign with it, and the ledger
 *   schema's access is what protects it, like the provider secrets in the catalog's environment).
 * - `webhook_events`: what happened, once per event, written in the transaction that made it happen
 *   (a fired budget threshold: trigger on budget_alerts; a top-up: ledger.ts). Its `event_id` is the
 *   Standard Webhooks `webhook-id` (the budget alert's own event id), the same on every retry.
 * - `webhook_deliveries`: one row per (event, subscribed enabled endpoint), made in that same
 *   transaction by a trigger on webhook_events, so an event that commits is sent and one that rolls back
 *   is not. The dispatcher (webhooks/webhook-dispatcher.ts) claims the due head of each endpoint's queue
 *   with FOR UPDATE SKIP LOCKED and a lease (lease_until), so two ledger replicas never send one delivery
 *   at once, and an endpoint's later delivery waits until the earlier one is delivered or dead.
 */
export const webhooks: Migration = {
  async up(db: Kysely<any>) {
    await sql`
      create table webhook_endpoints (
        id text primary key,
        account_id text not null,
        url text not null check (length(url) <= 2048),
        event_types text[] not null check (cardinality(event_types) between 1 and 16),
        enabled boolean not null default true,
        secret text not null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      )`.execute(db);
    await sql`create index webhook_endpoints_account on webhook_endpoints (account_id, created_at)`.execute(db);
    await sql`
      create table webhook_events (
        id bigint generated always as identity primary key,
        event_id text not null unique,
        account_id text not null,
        type text not null,
        data jsonb not null,
        created_at timestamptz not null default now()
      )`.execute(db);
    await sql`create index webhook_events_created on webhook_events (created_at)`.execute(db);
    await sql`
      create table webhook_deliveries (
        id bigint generated always as identity primary key,
        event_row_id bigint not null references webhook_events (id) on delete cascade,
        endpoint_id text not null references webhook_endpoints (id) on delete cascade,
        account_id text not null,
        state text not null default 'pending' check (state in ('pending', 'delivered', 'dead')),
        attempts integer not null default 0,
        next_attempt_at timestamptz not null default now(),
        lease_token text,
        lease_until timestamptz,
        last_status integer,
        last_error text,
        last_attempt_at timestamptz,
        created_at timestamptz not null default now(),
        finished_at timestamptz,
        unique (event_row_id, endpoint_id)
      )`.execute(db);
    // The dispatcher's queue heads: the oldest pending delivery of each endpoint.
    await sql`create index webhook_deliveries_pending on webhook_deliveries (endpoint_id, id) where state = 'pending'`.execute(db);
    await sql`create index webhook_deliveries_endpoint on webhook_deliveries (endpoint_id, id desc)`.execute(db);
    await sql`create index webhook_deliveries_finished on webhook_deliveries (finished_at) where state <> 'pending'`.execute(db);

    // Fan-out: one delivery per subscribed enabled endpoint of the event's account, in the event's transaction.
    await sql`
      create function webhook_events_to_deliveries() returns trigger language plpgsql as $$
      begin
        insert into webhook_deliveries (event_row_id, endpoint_id, account_id)
        select e.id, w.id, e.account_id
        from inserted_events e
        join webhook_endpoints w on w.account_id = e.account_id and w.enabled and e.type = any (w.event_types)
        order by e.id, w.id;
        return null;
      end $$`.execute(db);
    await sql`
      create trigger webhook_events_deliveries after insert on webhook_events
      referencing new table as inserted_events
      for each statement execute function webhook_events_to_deliveries()`.execute(db);

    // A fired budget threshold is a budget.threshold_crossed event, in the settlement transaction that fired it.
    await sql`
      create function budget_alerts_to_webhook_events() returns trigger language plpgsql as $$
      begin
        insert into webhook_events (event_id, account_id, type, data, created_at)
        select a.event_id, a.account_id, 'budget.threshold_crossed',
          jsonb_build_object(
            'scope', case when a.key_id = '' then 'account' else 'key' end,
            'key_id', nullif(a.key_id, ''),
            'period', a.period,
            'period_start', a.period_start::text,
            'threshold', a.threshold_percent,
            'limit', trim_scale(a.limit_pico::numeric / 1000000000000)::text,
            'spent', trim_scale(a.spent_pico::numeric / 1000000000000)::text),
          a.fired_at
        from inserted_alerts a
        -- An account without endpoints has nobody to tell (a later endpoint is not sent past events).
        where exists (select 1 from webhook_endpoints w where w.account_id = a.account_id)
        order by a.id;
        return null;
      end $$`.execute(db);
    await sql`
      create trigger budget_alerts_webhook_events after insert on budget_alerts
      referencing new table as inserted_alerts
      for each statement execute function budget_alerts_to_webhook_events()`.execute(db);
  },
};
