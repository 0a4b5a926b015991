import { randomBytes, randomInt } from 'node:crypto';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import type { Logger } from '@gateway/platform';
import { sql } from '@gateway/platform/db';
import type { LedgerDatabase } from '../ledger-db.js';
import { openWebhookSecret, type WebhookSecretKey } from './secret-box.js';
import { guardedLookup, isRefusedAddress, signWebhook } from './webhook-target.js';

/*
 * Webhook delivery (docs/governance.md "Webhooks"): a loop on a timer in every ledger replica, never on a
 * request path. Each tick claims due deliveries — only the oldest pending one of each endpoint, so an
 * endpoint receives its account's events in the order they happened — with FOR UPDATE SKIP LOCKED and a
 * lease (lease_until, lease_token): two replicas never send one delivery at once, and a replica that
 * died mid-send leaves a lease that runs out, after which another sends it again (at least once: a
 * receiver deduplicates by `webhook-id`). A failed attempt is retried with exponential backoff and
 * jitter; after `maxAttempts` attempts, or once the delivery is `deadAfterMs` old, it is dead-lettered
 * (visible in the deliveries list, redeliverable) and the endpoint's next delivery goes.
 * Bounds: `maxInFlight` sends at once per replica, `maxInFlightPerAccount` per account over all replicas, a
 * whole-request timeout, a cap on the response bytes read.
 */

export interface WebhookDispatcherOptions {
  /** The key the endpoints' secrets are sealed with (secret-box.ts). */
  secretKey: WebhookSecretKey;
  /** Plain http and private/loopback receivers allowed (GATEWAY_WEBHOOKS_ALLOW_PRIVATE=1). */
  allowPrivate: boolean;
  /** How often a replica looks for due deliveries (default 1 s). */
  intervalMs?: number;
  /** First retry delay (default 10 s), doubled per attempt up to maxBackoffMs (default 1 h), with jitter. */
  baseBackoffMs?: number;
  maxBackoffMs?: number;
  /** Attempts before the dead letter (default 15). */
  maxAttempts?: number;
  /** Age (since it became pending) past which a failing delivery is dead-lettered (default 24 h). */
  deadAfterMs?: number;
  /** One attempt, connection to last byte read (default 10 s). */
  requestTimeoutMs?: number;
  /** Bytes of a receiver's answer read before the connection is closed (default 16 KiB). */
  responseBodyMaxBytes?: number;
  /** Sends in flight per replica (default 16). */
  maxInFlight?: number;
  /** Sends in flight per account, over every replica (default 4): one account's slow receivers cannot take every slot. */
  maxInFlightPerAccount?: number;
  /** How long finished deliveries and their events are kept (default 30 days). */
  retentionMs?: number;
}

export const DEFAULT_WEBHOOK_OPTIONS = {
  intervalMs: 1_000,
  baseBackoffMs: 10_000,
  maxBackoffMs: 3_600_000,
  maxAttempts: 15,
  deadAfterMs: 24 * 3_600_000,
  requestTimeoutMs: 10_000,
  responseBodyMaxBytes: 16 * 1024,
  maxInFlight: 16,
  maxInFlightPerAccount: 4,
  retentionMs: 30 * 24 * 3_600_000,
} as const;

const ERROR_TEXT_MAX = 500;
const CLEANUP_EVERY_MS = 3_600_000;
const CLEANUP_BATCH = 1_000;

type Claimed = {
  id: string; endpoint_id: string; event_id: string; type: string; data: unknown; event_created_at: Date; account_id: string;
  url: string; secret: string; previous_secret: string | null; attempts: number;
};

export interface AttemptResult {
  ok: boolean;
  status: number | null;
  error: string;
}

/** Exponential backoff with jitter: a delay between half and all of min(max, base × 2^(attempt−1)). */
export function backoffMs(attempt: number, baseMs: number, maxMs: number): number {
  const full = Math.min(maxMs, baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 40));
  const half = Math.floor(full / 2);
  return half + randomInt(0, Math.max(full - half, 1));
}

/** The JSON body of an event (the Standard Webhooks payload shape: type, timestamp, data). */
export function webhookBody(event: { eventId: string; type: string; accountId: string; createdAt: Date; data: unknown }): string {
  return JSON.stringify({ id: event.eventId, type: event.type, timestamp: event.createdAt.toISOString(), account_id: event.accountId, data: event.data });
}

/** One POST: signed, bounded in time and in what is read back. Never throws. */
export function sendWebhook(
  target: { url: string; secret: string; previousSecret?: string | null; messageId: string; body: string },
  limits: { allowPrivate: boolean; requestTimeoutMs: number; responseBodyMaxBytes: number },
): Promise<AttemptResult> {
  return new Promise((resolve) => {
    let url: URL;
    try {
      url = new URL(target.url);
    } catch {
      resolve({ ok: false, status: null, error: 'url is not valid' });
      return;
    }
    if (url.protocol !== 'https:' && !(limits.allowPrivate && url.protocol === 'http:')) {
      resolve({ ok: false, status: null, error: 'url must use https' });
      return;
    }
    // A literal address skips the socket's lookup: judged here.
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    if (!limits.allowPrivate && isIP(host) !== 0 && isRefusedAddress(host)) {
      resolve({ ok: false, status: null, error: `refused address ${host}` });
      return;
    }
    const timestamp = Math.floor(Date.now() / 1000);
    let settled = false;
    const finish = (result: AttemptResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      outgoing.destroy();
      resolve({ ...result, error: result.error.slice(0, ERROR_TEXT_MAX) });
    };
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const outgoing = send(url, {
      method: 'POST',
      agent: false,
      lookup: guardedLookup(limits.allowPrivate),
      headers: {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(target.body),
        'user-agent': 'inference-gateway-webhooks/1',
        'webhook-id': target.messageId,
        'webhook-timestamp': String(timestamp),
        // In a rotation's overlap window, a second signature with the replaced secret (space-separated, as Standard Webhooks allows).
        'webhook-signature': [target.secret, ...(target.previousSecret ? [target.previousSecret] : [])]
          .map((secret) => signWebhook(secret, target.messageId, timestamp, target.body)).join(' '),
      },
    }, (answer: IncomingMessage) => {
      const status = answer.statusCode ?? 0;
      let read = 0;
      const done = () => finish({ ok: status >= 200 && status < 300, status, error: status >= 200 && status < 300 ? '' : `receiver answered ${status}` });
      answer.on('data', (chunk: Buffer) => {
        read += chunk.length;
        // The answer's body is not needed beyond its status: stop reading past the cap.
        if (read > limits.responseBodyMaxBytes) done();
      });
      answer.on('end', done);
      answer.on('error', done);
    });
    const timer = setTimeout(() => finish({ ok: false, status: null, error: `no answer within ${limits.requestTimeoutMs} ms` }), limits.requestTimeoutMs);
    outgoing.on('error', (error: Error) => finish({ ok: false, status: null, error: error.message }));
    outgoing.end(target.body);
  });
}

export interface WebhookDispatcher {
  /** One claim round (the timer calls it). Resolves with the number claimed when they filled the room, else 0. */
  runOnce(): Promise<number>;
  stop(): Promise<void>;
}

export function startWebhookDispatcher(db: LedgerDatabase, logger: Logger, options: WebhookDispatcherOptions): WebhookDispatcher {
  const settings = { ...DEFAULT_WEBHOOK_OPTIONS, ...Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined)) } as Required<WebhookDispatcherOptions>;
  for (const [name, value] of Object.entries(settings)) {
    if (typeof value === 'number' && (!Number.isInteger(value) || value <= 0)) throw new Error(`webhook option ${name} must be a positive integer: ${value}`);
  }
  // Past the request timeout with a margin: a live sender always finishes (or gives up) before its lease ends.
  const leaseMs = settings.requestTimeoutMs + 30_000;
  let lastCleanupAt = 0;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<number> | null = null;
  let stopped = false;

  // The due head of each endpoint, at most maxInFlightPerAccount leased per account (counting what other
  // rounds and replicas hold), leased in the statement that picks it.
  const claim = async (token: string, count: number): Promise<Claimed[]> => (await sql<Claimed>`
    with heads as (
      select distinct on (endpoint_id) id, account_id from webhook_deliveries
      where state = 'pending'
      order by endpoint_id, id
    ), busy as (
      select account_id, count(*) as leased from webhook_deliveries
      where state = 'pending' and lease_until >= now()
      group by account_id
    ), ranked as (
      select d.id, h.account_id, row_number() over (partition by h.account_id order by d.next_attempt_at, d.id) as rank
      from heads h
      join webhook_deliveries d on d.id = h.id
      join webhook_endpoints w on w.id = d.endpoint_id and w.enabled
      where d.next_attempt_at <= now() and (d.lease_until is null or d.lease_until < now())
    ), due as (
      select d.id from webhook_deliveries d
      join ranked r on r.id = d.id
      left join busy b on b.account_id = r.account_id
      where r.rank + coalesce(b.leased, 0) <= ${settings.maxInFlightPerAccount}
        and d.state = 'pending' and d.next_attempt_at <= now() and (d.lease_until is null or d.lease_until < now())
      order by d.next_attempt_at, d.id
      limit ${count}
      for update of d skip locked
    ), leased as (
      update webhook_deliveries d set lease_token = ${token}, lease_until = now() + ${leaseMs} * interval '1 millisecond',
        attempts = d.attempts + 1, last_attempt_at = now()
      from due where d.id = due.id
      returning d.id, d.event_row_id, d.endpoint_id, d.account_id, d.attempts
    )
    select l.id::text as id, l.endpoint_id, e.event_id, e.type, e.data, e.created_at as event_created_at, l.account_id, w.url, w.secret,
      case when w.previous_secret_until > now() then w.previous_secret end as previous_secret, l.attempts
    from leased l join webhook_events e on e.id = l.event_row_id join webhook_endpoints w on w.id = l.endpoint_id
    order by l.id`.execute(db)).rows;

  const record = async (delivery: Claimed, token: string, result: AttemptResult) => {
    const retryMs = backoffMs(delivery.attempts, settings.baseBackoffMs, settings.maxBackoffMs);
    const finished = (await sql<{ state: string; event_row_id: string }>`
      update webhook_deliveries set
        state = case when ${result.ok} then 'delivered'
                     when attempts >= ${settings.maxAttempts} or created_at <= now() - ${settings.deadAfterMs} * interval '1 millisecond' then 'dead'
                     else 'pending' end,
        next_attempt_at = now() + ${retryMs} * interval '1 millisecond',
        last_status = ${result.status}, last_error = ${result.error === '' ? null : result.error},
        lease_token = null, lease_until = null
      where id = ${delivery.id}::bigint and lease_token = ${token}
      returning state, event_row_id::text`.execute(db)).rows[0];
    if (!finished) {
      logger.warn({ deliveryId: delivery.id }, 'webhook delivery lease ran out before its result was recorded; it will be sent again');
      return;
    }
    if (finished.state === 'pending') return;
    await sql`update webhook_deliveries set finished_at = now() where id = ${delivery.id}::bigint`.execute(db);
    if (finished.state === 'dead') logger.warn({ deliveryId: delivery.id, eventId: delivery.event_id, status: result.status, error: result.error }, 'webhook delivery dead-lettered');
    // The budget alert's outbox state: delivered once any endpoint has it, dead when every endpoint's delivery died.
    if (delivery.type === 'budget.threshold_crossed') {
      await sql`
        update budget_alerts set delivery_state = s.state
        from (select case when bool_or(state = 'delivered') then 'delivered' when bool_and(state = 'dead') then 'dead' else 'pending' end as state
              from webhook_deliveries where event_row_id = ${finished.event_row_id}::bigint) s
        where event_id = ${delivery.event_id} and delivery_state <> s.state`.execute(db);
    }
  };

  const cleanup = async () => {
    await sql`
      delete from webhook_events where id in (
        select e.id from webhook_events e
        where e.created_at < now() - ${settings.retentionMs} * interval '1 millisecond'
          and not exists (select 1 from webhook_deliveries d where d.event_row_id = e.id and d.state = 'pending')
        limit ${CLEANUP_BATCH})`.execute(db);
  };

  // Sends run beside the rounds (a slow receiver holds its slot, not the loop): a round claims only the room left.
  let inFlight = 0;
  const sending = new Set<Promise<void>>();
  const deliver = async (delivery: Claimed, token: string) => {
    try {
      let secrets: { secret: string; previousSecret: string | null } | null = null;
      try {
        secrets = {
          secret: openWebhookSecret(settings.secretKey, delivery.endpoint_id, delivery.secret),
          previousSecret: delivery.previous_secret === null ? null : openWebhookSecret(settings.secretKey, delivery.endpoint_id, delivery.previous_secret),
        };
      } catch {
        logger.error({ endpointId: delivery.endpoint_id }, 'a webhook endpoint\'s secret does not open with this ledger\'s WEBHOOK_SECRET_KEY');
      }
      const result: AttemptResult = secrets === null
        ? { ok: false, status: null, error: 'the endpoint\'s secret does not open with the ledger\'s WEBHOOK_SECRET_KEY' }
        : await sendWebhook({
          url: delivery.url, ...secrets, messageId: delivery.event_id,
          body: webhookBody({ eventId: delivery.event_id, type: delivery.type, accountId: delivery.account_id, createdAt: delivery.event_created_at, data: delivery.data }),
        }, settings);
      await record(delivery, token, result);
    } catch (error) {
      logger.error({ err: error, deliveryId: delivery.id }, 'recording a webhook attempt failed; its lease runs out and it is sent again');
    } finally {
      inFlight--;
    }
  };

  const runOnce = async (): Promise<number> => {
    const room = settings.maxInFlight - inFlight;
    if (room > 0) {
      const token = randomBytes(12).toString('hex');
      const claimed = await claim(token, room);
      inFlight += claimed.length;
      for (const delivery of claimed) {
        const send = deliver(delivery, token);
        sending.add(send);
        void send.finally(() => sending.delete(send));
      }
      if (claimed.length === room) return claimed.length;
    }
    if (Date.now() - lastCleanupAt >= CLEANUP_EVERY_MS) {
      lastCleanupAt = Date.now();
      await cleanup().catch((error: unknown) => logger.error({ err: error }, 'webhook retention cleanup failed'));
    }
    return 0;
  };

  const schedule = (delayMs: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = runOnce().catch((error: unknown) => {
        logger.error({ err: error }, 'webhook dispatch round failed');
        return 0;
      });
      void running.then((sent) => {
        running = null;
        // A round that filled the room may have more due behind it: go again soon.
        schedule(sent > 0 ? Math.min(settings.intervalMs, 10) : settings.intervalMs);
      });
    }, delayMs);
    timer.unref();
  };
  schedule(settings.intervalMs);

  return {
    runOnce,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
      await Promise.all([...sending]);
    },
  };
}
