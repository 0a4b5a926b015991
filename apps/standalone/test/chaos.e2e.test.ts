import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, formatCredits, parseCredits } from '@gateway/platform';
import { createDatabase, sql } from '@gateway/platform/db';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import {
  createTestBus, createTestDatabase, eventually, startFakeUpstream, TEST_ADMIN_TOKEN,
  type FakeUpstream, type TestBus, type TestDatabase,
} from '@gateway/testing';
import { runGatewayctlProcess } from '../src/bench/gatewayctl-process.js';
import { freePort } from '../src/index.js';
import { testAdmission } from './admission-mode.js';
import {
  chaosCatalog, chaosUpstreamScript, clientAgent, exited, HOLD_PICO, killsBefore, REQUEST_KINDS, seededRandom, sendRequest, startBalancer,
  UPSTREAM_KEY_ENV, type Balancer, type KillRecord, type ReplicaKind, type RequestRecord,
} from './chaos-harness.js';
import { createAccountKey, healthStatus, startProcessStack, type ProcessStack } from './process-stack.js';
import { gatewayctlEnv } from './stack-harness.js';

// Issue 36: a platform team's cluster failing as clusters do. Every service is its own process: two
// edges behind a round-robin balancer (chaos-harness.ts: a TCP balancer that follows /readyz, as a
// Kubernetes Service), two routing and two ledger replicas, auth, catalog and media, on real Postgres
// and NATS JetStream, a fake provider as a real HTTP server. Sixteen clients of four small accounts send
// chat (streamed and not), streamed messages, responses and embeddings; every 10 s one replica of edge,
// routing or ledger, picked by a seeded random source, is SIGKILLed or SIGTERMed and restarted.
// Afterwards: every answered request charged exactly its usage.cost, no balance below zero, the journal
// verifies, every failure a 503 with Retry-After (or a stream's error event) within 2 s of a kill and
// never a 500, no 402 while the balance covered the request (but for a SIGKILLed holder's leases until
// they are due back), no request a SIGTERMed process had accepted lost, every replica healthy within 30 s.
//
// GATEWAY_CHAOS_SECONDS (default 60) and GATEWAY_CHAOS_SEED (default 36; `random` draws one) set the run;
// both are printed at the start. The 60 s run in `npm test` keeps seed 36's kill schedule (a ledger SIGTERM,
// an edge SIGKILL, a ledger SIGTERM, a routing SIGTERM, a ledger SIGKILL): the traffic's timing still varies
// run to run, the kinds of failure do not. The 10-minute run of docs/operations.md is GATEWAY_CHAOS_SECONDS=600;
// random seeds are for hunting (docs/operations.md lists what they still find).
// The ledger's lease lifetime is test-short (6 s, 3 s of it the drain), so a SIGKILLed edge's leases are
// due back within the run; production's default is 45 s (docs/operations.md).

const SECONDS = Number(process.env.GATEWAY_CHAOS_SECONDS ?? 60);
const SEED = process.env.GATEWAY_CHAOS_SEED === 'random' ? Math.floor(Math.random() * 2 ** 31) : Number(process.env.GATEWAY_CHAOS_SEED ?? 36);
/**
 * Whether a routing replica may be SIGKILLed (otherwise it is SIGTERMed when drawn). On by default; set
 * GATEWAY_CHAOS_ROUTING_SIGKILL=0 to leave it out. It was off while a fault this test found stood: a routing
 * process SIGKILLed after the bus stored a non-streamed answer's usage and before the answer reached the
 * edge left the caller with a 503 and a charge. The edge now voids such a request (LedgerService.VoidCharge;
 * undelivered-answer.e2e.test.ts reproduces it deterministically). One routing-SIGKILL fault stands (a short
 * stream whose usage was not yet stored: docs/operations.md); seed 36's first minute draws no routing SIGKILL.
 */
const ROUTING_SIGKILL = process.env.GATEWAY_CHAOS_ROUTING_SIGKILL !== '0';
const KILL_EVERY_MS = 10_000;
const CLIENTS = 16;
const BALANCES = ['0.3', '0.4', '0.6', '1'];
const LEASE_LIFETIME_MS = 6_000;
const LEASE_DRAIN_MS = 3_000;
const SWEEP_INTERVAL_MS = 500;
/** A failure must come within this long of a kill (issue 36). */
const FAILURE_WINDOW_MS = 2_000;
/** A restarted replica must be healthy within this long (issue 36). */
const RECOVERY_LIMIT_MS = 30_000;
/** How long after a SIGKILL (of an edge, or of a ledger that may have granted a lease whose answer was lost) its leases may still hold capacity. */
const LEASES_DUE_BACK_MS = LEASE_LIFETIME_MS + SWEEP_INTERVAL_MS + 2_000;

interface Replica {
  kind: ReplicaKind;
  index: number;
  /** What a restart passes to launch (its address or port, outbox directory, the replica lists). */
  env: Record<string, string>;
  child: ChildProcess;
  healthy: boolean;
  isHealthy(): Promise<boolean>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

describe.skipIf(testAdmission === 'ledger')('chaos: replicas killed and restarted under load (issue 36)', () => {
  let database: TestDatabase;
  let testBus: TestBus;
  let upstream: FakeUpstream;
  /** The tags of the requests the provider received. */
  let providerSaw: Set<string>;
  let directory: string;
  let stack: ProcessStack;
  let balancer: Balancer;
  const replicas: Replica[] = [];

  beforeAll(async () => {
    console.info(`chaos: GATEWAY_CHAOS_SEED=${SEED} GATEWAY_CHAOS_SECONDS=${SECONDS} GATEWAY_CHAOS_ROUTING_SIGKILL=${ROUTING_SIGKILL ? 1 : 0}`);
    database = await createTestDatabase();
    testBus = await createTestBus('nats');
    // The provider keeps idle connections 2 minutes (as providers behind load balancers do): with node's 5 s,
    // routing (whose event loop lags seconds on this loaded machine) sometimes reused a connection the fake was
    // closing, and with one provider per model that attempt's failure is a 503 no_upstream away from any kill —
    // a routing-to-provider race this test is not about (docs/operations.md, "Replicas killed under load").
    upstream = await startFakeUpstream({ keepAliveTimeoutMs: 120_000 });
    providerSaw = chaosUpstreamScript(upstream);
    directory = await mkdtemp(join(tmpdir(), 'chaos-'));
    const configPath = join(directory, 'gateway.yaml');
    await writeFile(configPath, chaosCatalog(upstream));
    stack = await startProcessStack(database, testBus, {
      catalog: { GATEWAY_CONFIG: configPath },
      routing: { [UPSTREAM_KEY_ENV]: 'chaos-key', USAGE_OUTBOX_DIR: join(directory, 'routing-0') },
      ledger: { LEASE_LIFETIME_MS: String(LEASE_LIFETIME_MS), LEASE_DRAIN_MS: String(LEASE_DRAIN_MS), SWEEP_INTERVAL_MS: String(SWEEP_INTERVAL_MS) },
    }, { extraRouting: { count: 1, outboxRoot: directory }, extraLedgers: 1 });
    const edgeChild = stack.running.get('edge')!;
    const routerAddr = `ipv4:${stack.routingReplicas.map((replica) => replica.address).join(',')}`;
    const ledgerAddr = `ipv4:${stack.ledgerReplicas.join(',')}`;
    const firstEdgePort = Number(new URL(stack.edgeUrl).port);
    const secondEdgePort = await freePort();
    const edgeEnv = (port: number) => ({ PORT: String(port), ROUTER_ADDR: routerAddr, LEDGER_ADDR: ledgerAddr });
    const edgeReady = (port: number) => async () => (await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(2_000) })).status === 200;
    const grpcServing = (address: string) => async () => (await healthStatus(address)) === 'SERVING';
    const secondEdge = stack.launch('edge', { ...edgeEnv(secondEdgePort), METRICS_PORT: String(await freePort()) });
    replicas.push(
      { kind: 'edge', index: 0, env: edgeEnv(firstEdgePort), child: edgeChild, healthy: true, isHealthy: edgeReady(firstEdgePort) },
      { kind: 'edge', index: 1, env: edgeEnv(secondEdgePort), child: secondEdge, healthy: true, isHealthy: edgeReady(secondEdgePort) },
      ...stack.routingReplicas.map((replica, index): Replica => ({
        kind: 'routing', index, env: { GRPC_LISTEN: replica.address, USAGE_OUTBOX_DIR: join(directory, `routing-${index}`) },
        child: stack.listeningOn.get(replica.address)!, healthy: true, isHealthy: grpcServing(replica.address),
      })),
      ...stack.ledgerReplicas.map((address, index): Replica => ({
        kind: 'ledger', index, env: { GRPC_LISTEN: address }, child: stack.listeningOn.get(address)!, healthy: true, isHealthy: grpcServing(address),
      })),
    );
    for (const replica of replicas) {
      await eventually(async () => expect(await replica.isHealthy().catch(() => false), `${replica.kind} ${replica.index}\n${stack.logs.join('')}`).toBe(true), 60_000, 200);
    }
    balancer = await startBalancer([firstEdgePort, secondEdgePort]);
  }, 180_000);

  afterAll(async () => {
    await balancer?.close();
    await stack?.stop();
    await upstream?.close();
    await testBus?.destroy();
    await database?.drop();
    if (directory) await rm(directory, { recursive: true, force: true });
  }, 60_000);

  it(`${SECONDS} s of mixed traffic with a replica killed every 10 s: exact money, only 503s near kills, nothing lost, all back within 30 s`, async () => {
    const accounts = await Promise.all(BALANCES.map((credits, index) => createAccountKey(stack, `chaos-${index}`, credits)));
    const random = seededRandom(SEED);
    const records: RequestRecord[] = [];
    const kills: KillRecord[] = [];
    const start = Date.now();
    const end = start + SECONDS * 1_000;

    /** Launches a replica again on its own address or port (a fresh metrics port), until it stays up. */
    const relaunch = async (replica: Replica) => {
      for (let attempt = 1; ; attempt++) {
        replica.child = stack.launch(replica.kind, { ...replica.env, METRICS_PORT: String(await freePort()) });
        const deadline = Date.now() + 60_000;
        while (Date.now() < deadline && !exited(replica.child)) {
          if (await replica.isHealthy().catch(() => false)) return;
          await sleep(100);
        }
        if (!exited(replica.child) || attempt >= 3) throw new Error(`${replica.kind} ${replica.index} did not come back:\n${stack.logs.slice(-50).join('')}`);
      }
    };
    const killAndRestart = async (replica: Replica, signal: 'SIGKILL' | 'SIGTERM') => {
      replica.healthy = false;
      const kill: KillRecord = { kind: replica.kind, index: replica.index, signal, at: 0 };
      kills.push(kill);
      const child = replica.child;
      const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      // Kubernetes takes a terminating pod out of the Service as it sends SIGTERM.
      if (replica.kind === 'edge' && signal === 'SIGTERM') balancer.remove(replica.index);
      kill.at = Date.now();
      child.kill(signal);
      kill.exitCode = await exit;
      kill.exitedAt = Date.now();
      kill.restartedAt = Date.now();
      await relaunch(replica);
      kill.healthyAt = Date.now();
      replica.healthy = true;
    };

    // The chaos: at every 10 s mark, a replica whose sibling is up.
    let skippedTicks = 0;
    const chaos = (async () => {
      const restarts: Promise<void>[] = [];
      for (let tick = 1; start + tick * KILL_EVERY_MS < end; tick++) {
        await sleep(start + tick * KILL_EVERY_MS - Date.now());
        const candidates = replicas.filter((replica) => replica.healthy
          && replicas.every((other) => other === replica || other.kind !== replica.kind || other.healthy));
        const pick = random();
        const signal = random() < 0.5 ? 'SIGKILL' : 'SIGTERM';
        if (candidates.length === 0) {
          skippedTicks++;
          continue;
        }
        const victim = candidates[Math.floor(pick * candidates.length)]!;
        restarts.push(killAndRestart(victim, victim.kind === 'routing' && !ROUTING_SIGKILL ? 'SIGTERM' : signal));
      }
      await Promise.all(restarts);
    })();

    // The traffic: 16 closed-loop clients, four per account, each request's kind drawn from the seed.
    const agent = clientAgent();
    const traffic = Promise.all(Array.from({ length: CLIENTS }, async (_, client) => {
      const pick = seededRandom(SEED * 31 + client + 1);
      const account = client % accounts.length;
      for (let sent = 0; Date.now() < end; sent++) {
        const kind = REQUEST_KINDS[Math.floor(pick() * REQUEST_KINDS.length)]!;
        const record = await sendRequest(agent, balancer.url, accounts[account]!.apiKey, account, kind, `${client}-${sent}`);
        records.push(record);
        if (record.outcome !== 'answered') await sleep(100);
      }
    }));
    // The fake upstream keeps every request it saw: forget them as the run goes (a 10-minute run sends tens of thousands).
    const forget = setInterval(() => upstream.reset(), 10_000);
    try {
      await traffic;
      await chaos;
    } finally {
      clearInterval(forget);
      await agent.close();
    }
    const trafficEndedAt = Date.now();

    // Every replica is up (the last restarts were awaited); the usage of every answer settles.
    const db = createDatabase<any>({ url: database.url, schema: 'ledger', maxConnections: 2 });
    const ledger = createClient(LedgerServiceClient, LedgerServiceService, stack.ledgerReplicas[0]!, { credential: TEST_ADMIN_TOKEN });
    const violations: string[] = [];
    try {
      const answered = records.filter((record) => record.outcome === 'answered');
      const answeredIds = answered.map((record) => record.requestId!).filter(Boolean);
      expect(answeredIds.length).toBe(answered.length);
      const accountIds = accounts.map((account) => account.accountId);
      const chargeRows = async () => (await sql<{ request_id: string; account_id: string; cost: string }>`
        select c.request_id, c.account_id, c.cost_pico::text as cost from charges c
        where c.account_id = any(${accountIds})
          -- What stands: a void row (a request whose answer reached nobody, voided before its charge) and a
          -- charge refunded for the same reason are no charge.
          and not c.voided and not exists (select 1 from journal j where j.kind = 'refund' and j.request_id = c.request_id)`.execute(db)).rows;
      // Up to 60 s for every answer's charge; one still missing then is a violation, named below.
      let rows = await chargeRows();
      for (const settleBy = Date.now() + 60_000; Date.now() < settleBy; rows = await chargeRows()) {
        const ids = new Set(rows.map((row) => row.request_id));
        if (answeredIds.every((id) => ids.has(id))) break;
        await sleep(500);
      }
      // Charges of requests cut mid-way (routing's outbox republishes what a kill interrupted) may come later: until stable.
      for (let stableSince = Date.now(); Date.now() - stableSince < 3_000;) {
        await sleep(500);
        const again = await chargeRows();
        if (again.length !== rows.length) stableSince = Date.now();
        rows = again;
      }

      // Requests: none lost; failures only near kills, only 503 with Retry-After or a stream's error event.
      const edgeKills = (kill: KillRecord) => kill.kind === 'edge' && kill.signal === 'SIGKILL';
      const holderKills = (kill: KillRecord) => (kill.kind === 'edge' || kill.kind === 'ledger') && kill.signal === 'SIGKILL';
      const describeRecord = (record: RequestRecord) =>
        `${record.kind} account ${record.account} ${record.outcome} ${record.status ?? ''} at +${(record.headersAt ?? record.endAt) - start} ms ` +
        `(sent +${record.startAt - start}) ${record.requestId ?? ''} ${record.detail ?? ''} ${record.body ?? ''}`.trim();
      const closedIdle: RequestRecord[] = [];
      const finals = await Promise.all(accountIds.map(async (accountId) => parseCredits((await ledger.getBalance({ accountId })).balance)));
      for (const record of records) {
        switch (record.outcome) {
          case 'answered':
            break;
          case 'timeout':
            violations.push(`no answer in 60 s: ${describeRecord(record)}`);
            break;
          case 'cut':
            // Only a SIGKILLed edge loses requests: those it held when it died, and those written on a kept-alive
            // connection to it before the balancer saw that connection close (its exit, plus scheduling on a loaded machine).
            if (kills.some((kill) => edgeKills(kill) && record.startAt <= Math.max(kill.at, kill.exitedAt ?? kill.at) + 500
              && kill.at <= record.endAt && record.endAt - kill.at <= FAILURE_WINDOW_MS)) break;
            // HTTP/1.1's keep-alive close race: a draining edge closes the kept-alive connections that stayed idle
            // through its accept grace, and a client that wrote a request on one just then gets the connection
            // closed before any byte of an answer. The edge never read that request (it would have answered it):
            // no request id, and the provider never saw it. Counted apart, not lost; SDKs retry such errors.
            if (!record.requestId && record.headersAt === undefined && !providerSaw.has(record.tag)
              && kills.some((kill) => kill.kind === 'edge' && kill.signal === 'SIGTERM' && kill.at <= record.startAt && record.endAt <= (kill.exitedAt ?? Infinity) + 500)) {
              closedIdle.push(record);
              break;
            }
            violations.push(`lost (no complete answer) but no edge was SIGKILLed under it: ${describeRecord(record)} (provider ${providerSaw.has(record.tag) ? 'saw' : 'never saw'} it)`);
            break;
          case 'stream-error':
            if (killsBefore(kills, record.endAt, FAILURE_WINDOW_MS).length === 0) violations.push(`stream error event away from any kill: ${describeRecord(record)}`);
            break;
          case 'refused': {
            const at = record.headersAt!;
            if (record.status === 402) {
              // Covered: the account's final balance (no more than it had then) less the holds of its other requests in flight.
              const inFlight = records.filter((other) => other !== record && other.account === record.account && other.startAt < at && other.endAt > at).length;
              const covered = finals[record.account]! - BigInt(inFlight) * HOLD_PICO >= HOLD_PICO;
              if (covered && killsBefore(kills, at, LEASES_DUE_BACK_MS, holderKills).length === 0) {
                violations.push(`402 while the balance covered the request (${formatCredits(finals[record.account]!)} at the end, ${inFlight} others in flight): ${describeRecord(record)}`);
              }
              break;
            }
            if (record.status !== 503 || !(Number(record.retryAfter) >= 1)) violations.push(`not a 503 with Retry-After: ${describeRecord(record)} retry-after ${record.retryAfter}`);
            else if (killsBefore(kills, at, FAILURE_WINDOW_MS).length === 0) violations.push(`503 more than ${FAILURE_WINDOW_MS} ms after any kill: ${describeRecord(record)}`);
            break;
          }
        }
      }

      // Kills: a SIGTERMed process exits 0 having answered what it held; every replica back within 30 s.
      for (const kill of kills) {
        const name = `${kill.signal} ${kill.kind} ${kill.index} at +${kill.at - start} ms`;
        if (kill.signal === 'SIGTERM' && kill.exitCode !== 0) violations.push(`${name} exited ${kill.exitCode}`);
        if (kill.healthyAt! - kill.restartedAt! > RECOVERY_LIMIT_MS) violations.push(`${name} healthy ${kill.healthyAt! - kill.restartedAt!} ms after its restart`);
        kill.inFlight = records.filter((record) => record.startAt <= kill.at && record.endAt >= kill.at).length;
      }

      // Money, per account: each answer's usage.cost is its charge to the pico-credit, charged once; the
      // balance moved by exactly the charges; charges beyond the answers' belong to requests cut mid-way.
      const doubled = (await sql<{ request_id: string; entries: number }>`
        select request_id, count(*)::int as entries from journal_entries
        where kind = 'charge' and account_id = any(${accountIds}) group by request_id having count(*) > 1`.execute(db)).rows;
      for (const row of doubled) violations.push(`request ${row.request_id} charged ${row.entries} times`);
      const money = accounts.map((account, index) => {
        const initial = parseCredits(BALANCES[index]!);
        const final = finals[index]!;
        const mine = rows.filter((row) => row.account_id === account.accountId);
        const charged = new Map(mine.map((row) => [row.request_id, BigInt(row.cost)]));
        const own = records.filter((record) => record.account === index);
        let answeredCost = 0n;
        for (const record of own.filter((item) => item.outcome === 'answered')) {
          answeredCost += record.costPico!;
          const charge = charged.get(record.requestId!);
          if (charge !== record.costPico) violations.push(`${describeRecord(record)}: usage.cost ${formatCredits(record.costPico!)} but charged ${charge === undefined ? 'nothing' : formatCredits(charge)}`);
        }
        const byId = new Map(own.filter((record) => record.requestId).map((record) => [record.requestId!, record]));
        let otherCost = 0n;
        let unknownCharges = 0;
        for (const [requestId, cost] of charged) {
          const record = byId.get(requestId);
          if (record?.outcome === 'answered') continue;
          otherCost += cost;
          if (record === undefined) unknownCharges++;
          else if (record.outcome === 'refused') violations.push(`refused request charged ${formatCredits(cost)}: ${describeRecord(record)}`);
        }
        const cutBeforeAnswer = own.filter((record) => (record.outcome === 'cut' || record.outcome === 'timeout') && !record.requestId).length;
        if (unknownCharges > cutBeforeAnswer) violations.push(`account ${index}: ${unknownCharges} charges of requests never answered, only ${cutBeforeAnswer} were cut before their answer`);
        const drop = initial - final;
        if (drop !== answeredCost + otherCost) violations.push(`account ${index}: balance dropped ${formatCredits(drop)}, charges ${formatCredits(answeredCost + otherCost)}`);
        if (final < 0n) violations.push(`account ${index}: balance ${formatCredits(final)} below zero`);
        return {
          account: index, initial: BALANCES[index], final: formatCredits(final), drop: formatCredits(drop), answered_cost: formatCredits(answeredCost),
          cut_requests_charged: formatCredits(otherCost), difference_pico: String(drop - answeredCost - otherCost),
        };
      });

      // `gatewayctl ledger verify` on every account of the database.
      const verify = await runGatewayctlProcess(['ledger', 'verify'],
        gatewayctlEnv({ ledger: stack.ledgerReplicas[0]!, auth: stack.addresses.auth, catalog: stack.addresses.catalog }, TEST_ADMIN_TOKEN));
      if (verify.code !== 0) violations.push(`ledger verify: ${verify.stdout}${verify.stderr}`);

      const count = (values: string[]) => Object.fromEntries([...values.reduce((map, value) => map.set(value, (map.get(value) ?? 0) + 1), new Map<string, number>())].sort());
      const recoveries = kills.map((kill) => kill.healthyAt! - kill.restartedAt!);
      const summary = {
        seed: SEED, seconds: SECONDS, routing_sigkill: ROUTING_SIGKILL, traffic_ms: trafficEndedAt - start,
        requests_sent: records.length,
        requests_answered: records.filter((record) => record.outcome !== 'cut' && record.outcome !== 'timeout').length,
        closed_idle_by_draining_edge: closedIdle.length,
        outcomes: count(records.map((record) => (record.outcome === 'refused' ? `${record.status}` : record.outcome))),
        by_kind: count(records.map((record) => `${record.kind} ${record.outcome === 'refused' ? record.status : record.outcome}`)),
        kills: count(kills.map((kill) => `${kill.kind} ${kill.signal}`)),
        kill_log: kills.map((kill) => `+${kill.at - start} ${kill.signal} ${kill.kind}-${kill.index} exit ${kill.exitCode} after ${kill.exitedAt! - kill.at} ms, healthy ${kill.healthyAt! - kill.restartedAt!} ms after restart, ${kill.inFlight} requests in flight`),
        skipped_ticks: skippedTicks,
        worst_recovery_ms: Math.max(0, ...recoveries),
        sigterm_in_flight_answered: kills.filter((kill) => kill.signal === 'SIGTERM').reduce((sum, kill) => sum + kill.inFlight!, 0),
        balancer_refused_connections: balancer.refusedConnections,
        money,
        failures: records.filter((record) => record.outcome !== 'answered').sort((a, b) => a.startAt - b.startAt).slice(0, 60).map(describeRecord),
        violations: violations.length,
      };
      console.info(`chaos summary: ${JSON.stringify(summary, null, 1)}`);
      if (violations.length > 0) {
        const logFile = join(tmpdir(), `chaos-${SEED}-${Date.now()}.log`);
        await writeFile(logFile, `${violations.join('\n')}\n\n${stack.logs.join('')}`);
        console.info(`chaos: violations and every process's output in ${logFile}`);
      }
      expect(violations.slice(0, 30), `seed ${SEED}: ${violations.length} violations`).toEqual([]);
      expect(kills.length).toBeGreaterThanOrEqual(Math.floor((SECONDS * 1_000 - 1) / KILL_EVERY_MS) - skippedTicks);
      expect(answered.length).toBeGreaterThan(SECONDS * 2);
      // Every replica is healthy at the end.
      for (const replica of replicas) expect(await replica.isHealthy().catch(() => false), `${replica.kind} ${replica.index}`).toBe(true);
    } finally {
      ledger.close();
      await db.destroy();
    }
  }, SECONDS * 1_000 + 240_000);
});
