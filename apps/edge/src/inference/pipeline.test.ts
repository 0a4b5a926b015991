import { describe, expect, it } from 'vitest';
import type { CatalogServiceClient, GetSnapshotResponse, Usage } from '@gateway/proto';
import { Cancellation, ErrorReason, GatewayError, GrpcStatus, type PromiseClient } from '@gateway/platform';
import { testLogger } from '@gateway/testing';
import { model } from '../../test/fakes.js';
import type { Admission, AdmissionRequest } from './admission.js';
import type { AnswerSink } from './answer-sink.js';
import { CatalogCache } from '../catalog-cache.js';
import type { EdgeContext } from '../context.js';
import { ClientGoneBeforeRouterError, ClientGoneError } from '../http.js';
import { runPipeline } from './pipeline.js';
import { InferenceJob, type InferenceSteps } from './pipeline-steps.js';
import { MINIMUM_HOLD_PICO } from './request-bounds.js';

// The pipeline is the one owner of a request's reservation at the edge: whatever a route's exchange does,
// the reservation is released when nothing was committed and settled with the committed usage otherwise.

const snapshot: GetSnapshotResponse = {
  version: 'v1',
  unchanged: false,
  moderationModel: '', defaultModels: {},
  models: [model({ id: 'acme/chat' }), model({ id: 'acme/free', pricing: { perInputToken: '0', perOutputToken: '0' } })],
  providers: [],
  startups: [],
  limitGroups: [{ id: 'default', tiers: { 'tier-1': { minute: 600 } } }],
};

const USAGE: Usage = { inputTokens: 12, outputTokens: 7 } as Usage;

/** Every admission call in order, as `admit:<hold>`, `release`, `settle:<usage or none>`. */
function recordingAdmission(refusal?: unknown): Admission & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    async admit({ holdPico }) {
      calls.push(`admit:${holdPico}`);
      if (refusal) throw refusal;
      return { reservedCredits: '0.05', leaseId: 'lease-1' };
    },
    async release() {
      calls.push('release');
    },
    settle({ usage }) {
      calls.push(`settle:${usage ? usage.outputTokens : 'none'}`);
    },
    async stop() {},
  };
}

async function contextWith(admission: Admission): Promise<EdgeContext> {
  const catalog = { getSnapshot: async () => snapshot } as unknown as PromiseClient<CatalogServiceClient>;
  const catalogCache = new CatalogCache({ catalog, logger: testLogger('pipeline-test'), now: () => 1_800_000_000_000 });
  await catalogCache.refresh();
  return { catalogCache, admission, now: () => 1_800_000_000_000 } as unknown as EdgeContext;
}

/** A sink that only records its close listeners (the steps below write nothing). */
function sink(): AnswerSink & { close(): void } {
  const listeners: (() => void)[] = [];
  return {
    onClose: (listener) => listeners.push(listener),
    close: () => listeners.splice(0).forEach((listener) => listener()),
    commit() {},
    write() {},
    end() {},
    json() {},
  };
}

type Body = { model: string };

function steps(exchange: InferenceSteps<Body, { holdPico: bigint }>['exchange'], holdPico = 0n): InferenceSteps<Body, { holdPico: bigint }> & { exchanged: number } {
  const route = {
    endpoint: 'chat.completions' as const,
    exchanged: 0,
    parse: (json: unknown) => json as Body,
    modelName: (body: Body) => body.model,
    prepare: () => ({ holdPico }),
    refused: (error: unknown) => (error instanceof GatewayError ? new GatewayError(error.status, error.reason, `${error.message} (as the route words it)`) : error),
    exchange: (...args: Parameters<typeof exchange>) => {
      route.exchanged += 1;
      return exchange(...args);
    },
  };
  return route;
}

const job = (modelId = 'acme/chat', signal = new Cancellation()) =>
  new InferenceJob<Body>('req_1', { accountId: 'acct', keyId: 'key', tier: 'tier-1', defaultRoutingStrategy: '' }, { model: modelId }, undefined, signal);

describe('the pipeline owns the reservation', () => {
  it('settles with the committed usage when the exchange completes, and the close changes nothing', async () => {
    const admission = recordingAdmission();
    const answer = sink();
    const started = job();
    await runPipeline(await contextWith(admission), steps(async (_prepared, running) => running.commit(USAGE)), started, answer);
    answer.close();
    expect(admission.calls).toEqual([`admit:${MINIMUM_HOLD_PICO}`, 'settle:7', 'settle:7']);
    expect(started.routerContext).toEqual({ requestId: 'req_1', accountId: 'acct', keyId: 'key', leaseId: 'lease-1' });
  });

  it('releases once when the exchange fails before its commit point, and rethrows the failure', async () => {
    const admission = recordingAdmission();
    const failure = new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'every attempt failed');
    const run = runPipeline(await contextWith(admission), steps(async () => { throw failure; }), job(), sink());
    await expect(run).rejects.toBe(failure);
    expect(admission.calls).toEqual([`admit:${MINIMUM_HOLD_PICO}`, 'release']);
  });

  it('settles, never releases, when the exchange fails after its commit point', async () => {
    const admission = recordingAdmission();
    const run = runPipeline(
      await contextWith(admission),
      steps(async (_prepared, running) => {
        running.commit(USAGE);
        throw new Error('the answer could not be written');
      }),
      job(),
      sink(),
    );
    await expect(run).rejects.toThrow('the answer could not be written');
    expect(admission.calls).toEqual([`admit:${MINIMUM_HOLD_PICO}`, 'settle:7']);
  });

  it('holds the larger of the route’s worst case and the minimum; a free model holds what the route says', async () => {
    const admission = recordingAdmission();
    const context = await contextWith(admission);
    await runPipeline(context, steps(async (_prepared, running) => running.commit(USAGE), MINIMUM_HOLD_PICO * 3n), job(), sink());
    await runPipeline(context, steps(async (_prepared, running) => running.commit(USAGE)), job('acme/free'), sink());
    expect(admission.calls.filter((call) => call.startsWith('admit'))).toEqual([`admit:${MINIMUM_HOLD_PICO * 3n}`, 'admit:0']);
  });

  it('a free model with a paid candidate is admitted as paid, with the minimum hold and every candidate, the job’s model first', async () => {
    const seen: AdmissionRequest[] = [];
    const admission = { ...recordingAdmission(), admit: async (request: AdmissionRequest) => (seen.push(request), { reservedCredits: '0.05' }) };
    const context = await contextWith(admission);
    const [free, paid] = [context.catalogCache.resolve('acme/free')!, context.catalogCache.resolve('acme/chat')!];
    // The route's prepare step names the candidates (as chat-steps does for `models`); its hold of a free model's worst case is 0.
    const route = { ...steps(async (_prepared, running) => running.commit(USAGE)), prepare: () => ({ holdPico: 0n, candidates: [free, paid] }) };
    await runPipeline(context, route, job('acme/free'), sink());
    expect(seen[0]).toMatchObject({ model: free, candidates: [free, paid], paid: true, holdPico: MINIMUM_HOLD_PICO });
    // Without candidates, the job's model alone decides.
    await runPipeline(context, steps(async (_prepared, running) => running.commit(USAGE)), job('acme/free'), sink());
    expect(seen[1]).toMatchObject({ model: free, candidates: undefined, paid: false, holdPico: 0n });
  });

  it('a refusal holds nothing and is worded by the route; a lost admission answer is released', async () => {
    const limited = recordingAdmission(new GatewayError(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_RATE_LIMITED, 'window full'));
    const route = steps(async () => {});
    await expect(runPipeline(await contextWith(limited), route, job(), sink())).rejects.toThrow('window full (as the route words it)');
    expect(limited.calls).toEqual([`admit:${MINIMUM_HOLD_PICO}`]);

    const lost = recordingAdmission(new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, 'ledger unreachable'));
    await expect(runPipeline(await contextWith(lost), route, job(), sink())).rejects.toThrow('ledger unreachable');
    expect(lost.calls).toEqual([`admit:${MINIMUM_HOLD_PICO}`, 'release']);
    expect(route.exchanged).toBe(0);
  });

  it('a client gone before the exchange releases without calling it; gone during it, the failure is a ClientGoneError and the hold counts as spent', async () => {
    const admission = recordingAdmission();
    const context = await contextWith(admission);
    const gone = new Cancellation();
    gone.abort();
    const route = steps(async () => {});
    await expect(runPipeline(context, route, job('acme/chat', gone), sink())).rejects.toBeInstanceOf(ClientGoneError);
    expect(route.exchanged).toBe(0);

    const leaving = new Cancellation();
    const during = steps(async () => {
      leaving.abort();
      throw new Error('stream reset');
    });
    await expect(runPipeline(context, during, job('acme/chat', leaving), sink())).rejects.toBeInstanceOf(ClientGoneError);
    // Gone during the exchange: an upstream may already have had the prompt, which routing charges
    // (the edge never learns that usage), so the lease estimate takes the whole hold (settle without usage).
    expect(admission.calls).toEqual([`admit:${MINIMUM_HOLD_PICO}`, 'release', `admit:${MINIMUM_HOLD_PICO}`, 'settle:none']);
  });

  it('a client gone during the exchange but before the Router had the request (its files being read) releases the hold', async () => {
    const admission = recordingAdmission();
    const context = await contextWith(admission);
    const leaving = new Cancellation();
    const reading = steps(async () => {
      leaving.abort();
      throw new ClientGoneBeforeRouterError('client left while its files were read');
    });
    await expect(runPipeline(context, reading, job('acme/chat', leaving), sink())).rejects.toBeInstanceOf(ClientGoneError);
    // Released, not settled: no upstream had it; a ledger reservation (a free model's) closes now.
    expect(admission.calls).toEqual([`admit:${MINIMUM_HOLD_PICO}`, 'release']);
  });
});
