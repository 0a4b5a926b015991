import { AccountEvent } from '@gateway/proto';
import { sql, type Kysely, type Migration } from 'kysely';
import type { Logger } from 'pino';
import { subjects, type EventBus } from '../bus/event-bus.js';

/*
 * The account-event outbox (docs/governance.md "Webhooks"): a service that owns keys or batches writes
 * what happened to them into its own schema's `account_event_outbox`, in the transaction of the change
 * (so an event exists exactly when its change committed), and a relay publishes the rows to the bus
 * (JetStream subject `accounts.events`, msg-id = event id) and deletes them. The ledger's consumer turns
 * them into webhook events once per event id. A relay that dies between publishing and deleting
 * publishes the rows again: the stream drops the duplicate within its window, the ledger after it.
 */

/** Rows one relay round claims and publishes at most. */
const RELAY_BATCH = 100;

/** The outbox table in the service's schema (its connections' search_path). */
export function accountEventOutboxMigration(): Migration {
  return {
    async up(db: Kysely<any>) {
      await sql`
        create table account_event_outbox (
          id bigint generated always as identity primary key,
          event_id text not null unique,
          account_id text not null,
          type text not null,
          data jsonb not null,
          created_at timestamptz not null default now()
        )`.execute(db);
    },
  };
}

/**
 * SQL for a plpgsql body: the outbox insert of one event. `accountId`, `type` and `data` are SQL
 * expressions of the trigger's row; the event id is fresh (`evt_` + 32 hex, as the ledger's own events).
 * `schema` qualifies the table (a trigger runs with whatever search_path its statement had).
 */
export function outboxInsertSql(schema: string, accountId: string, type: string, data: string): string {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) throw new Error(`not a safe schema name: ${schema}`);
  return `insert into ${schema}.account_event_outbox (event_id, account_id, type, data)
    values ('evt_' || replace(gen_random_uuid()::text, '-', ''), ${accountId}, ${type}, ${data});`;
}

export interface AccountEventRelayOptions {
  /** How often the outbox is read when nothing woke the relay (ms; default 1000). */
  intervalMs?: number;
}

export interface AccountEventRelay {
  /** Reads the outbox now (after a commit that wrote to it), instead of at the next interval. */
  wake(): void;
  /** One round: publishes what the outbox holds; the number of events published. */
  relayOnce(): Promise<number>;
  stop(): Promise<void>;
}

interface OutboxRow {
  id: bigint;
  event_id: string;
  account_id: string;
  type: string;
  data: string;
  created_at: Date;
}

/**
 * Publishes the outbox's rows, oldest first, RELAY_BATCH per round. The rows are claimed with
 * FOR UPDATE SKIP LOCKED in the round's transaction and deleted in it once the bus acknowledged each:
 * two replicas never publish one row at once, and a failed publish leaves the rows for the next round.
 */
export function startAccountEventRelay(db: Kysely<any>, bus: EventBus, logger: Logger, options: AccountEventRelayOptions = {}): AccountEventRelay {
  const intervalMs = options.intervalMs ?? 1_000;
  let stopped = false;
  let running: Promise<number> | null = null;
  let again = false;
  let failures = 0;

  const round = async (): Promise<number> => db.transaction().execute(async (trx) => {
    const claimed = await sql<OutboxRow>`
      select id, event_id, account_id, type, data::text as data, created_at from account_event_outbox
      order by id limit ${RELAY_BATCH} for update skip locked`.execute(trx);
    if (claimed.rows.length === 0) return 0;
    await Promise.all(claimed.rows.map((row) => bus.publishDurable(subjects.accountEvents, AccountEvent.encode({
      eventId: row.event_id, accountId: row.account_id, type: row.type, dataJson: row.data, occurredAtMs: BigInt(row.created_at.getTime()),
    }).finish(), row.event_id)));
    await sql`delete from account_event_outbox where id = any(${claimed.rows.map((row) => row.id)}::bigint[])`.execute(trx);
    return claimed.rows.length;
  });

  const relayOnce = (): Promise<number> => {
    if (running) { again = true; return running; }
    running = (async () => {
      let total = 0;
      try {
        for (;;) {
          again = false;
          const published = await round();
          total += published;
          if (stopped || (published < RELAY_BATCH && !again)) break;
        }
        failures = 0;
      } catch (error) {
        failures += 1;
        // Kept in the outbox; the next round tries again. Logged at the first failure and then now and again.
        if (failures === 1 || failures % 60 === 0) logger.warn({ err: error, failures }, 'account events not relayed yet; kept in the outbox');
      } finally {
        running = null;
      }
      return total;
    })();
    return running;
  };

  const timer = setInterval(() => void relayOnce(), intervalMs);
  timer.unref();
  void relayOnce();
  return {
    wake: () => { if (!stopped) void relayOnce(); },
    relayOnce,
    stop: async () => {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
