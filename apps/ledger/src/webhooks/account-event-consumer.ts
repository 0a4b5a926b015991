import { ACCOUNT_EVENTS_DURABLE, RELAYED_WEBHOOK_EVENT_TYPES, subjects, type EventBus, type Logger, type Subscription } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import { AccountEvent } from '@gateway/proto';
import type { LedgerDatabase } from '../ledger-db.js';

/*
 * Account events other services relay from their outboxes (auth: api_key.*, jobs: batch.completed;
 * @gateway/platform/db account-event-outbox) become webhook events here (docs/governance.md "Webhooks").
 * Once per event id (`on conflict do nothing`: a relay that published a row twice makes one event), and only
 * for an account with an endpoint, as the ledger's own events: the webhook_events trigger then fans each
 * out to the account's subscribed endpoints, in this same statement.
 */

const EVENT_ID = /^evt_[0-9a-f]{32}$/;
const ACCOUNT_ID_MAX = 64;
/** A relayed event's data is a handful of fields; anything larger is not one of ours. */
const DATA_MAX_CHARS = 4_096;

interface Decoded {
  eventId: string;
  accountId: string;
  type: string;
  data: string;
  occurredAtMs: string;
}

/** The event if it is well formed and of a relayed type; undefined otherwise (logged, acknowledged, dropped). */
export function acceptedAccountEvent(bytes: Uint8Array): Decoded | undefined {
  let event: AccountEvent;
  try {
    event = AccountEvent.decode(bytes);
  } catch {
    return undefined;
  }
  if (!EVENT_ID.test(event.eventId) || event.accountId === '' || event.accountId.length > ACCOUNT_ID_MAX) return undefined;
  if (!(RELAYED_WEBHOOK_EVENT_TYPES as readonly string[]).includes(event.type)) return undefined;
  if (event.dataJson.length > DATA_MAX_CHARS) return undefined;
  try {
    const data: unknown = JSON.parse(event.dataJson);
    if (typeof data !== 'object' || data === null || Array.isArray(data)) return undefined;
  } catch {
    return undefined;
  }
  return { eventId: event.eventId, accountId: event.accountId, type: event.type, data: event.dataJson, occurredAtMs: event.occurredAtMs.toString() };
}

/** Inserts the events (those of accounts with an endpoint, once per event id); the number inserted. */
export async function insertAccountEvents(db: LedgerDatabase, events: readonly Decoded[]): Promise<number> {
  if (events.length === 0) return 0;
  const inserted = await sql<{ id: bigint }>`
    insert into webhook_events (event_id, account_id, type, data, created_at)
    select e.event_id, e.account_id, e.type, e.data::jsonb, to_timestamp(e.at_ms::bigint / 1000.0)
    from unnest(${events.map((event) => event.eventId)}::text[], ${events.map((event) => event.accountId)}::text[],
      ${events.map((event) => event.type)}::text[], ${events.map((event) => event.data)}::text[], ${events.map((event) => event.occurredAtMs)}::text[])
      as e(event_id, account_id, type, data, at_ms)
    where exists (select 1 from webhook_endpoints w where w.account_id = e.account_id)
    order by e.at_ms::bigint, e.event_id
    on conflict (event_id) do nothing
    returning id`.execute(db);
  return inserted.rows.length;
}

/** The ledger's durable consumer of `accounts.events` (several ledger replicas share it). */
export function consumeAccountEvents(bus: EventBus, db: LedgerDatabase, logger: Logger): Promise<Subscription> {
  return bus.consumeDurable({ subject: subjects.accountEvents, durable: ACCOUNT_EVENTS_DURABLE, maxBatch: 100, lingerMs: 0 }, async (batch) => {
    const events: Decoded[] = [];
    for (const message of batch) {
      const event = acceptedAccountEvent(message.data);
      if (event) events.push(event);
      else logger.warn({ msgId: message.msgId }, 'malformed account event dropped');
    }
    // A throw (Postgres down) redelivers the batch; the insert is idempotent.
    const inserted = await insertAccountEvents(db, events);
    logger.debug({ messages: batch.length, inserted }, 'account events relayed to webhooks');
  });
}
