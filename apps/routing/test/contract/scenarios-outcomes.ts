import { expect } from 'vitest';
import { ProviderError } from '../../src/providers/provider-adapter.js';
import { adapterRequest, chatRequest, failureOf, message, onlyRequest, run, weatherTool, type Mode } from './contract-requests.js';
import type { ContractRig, ContractSetup, ScriptedAnswer, ScriptedUsage } from './contract-types.js';

/*
 * The scenarios about how an answer ends: finish reasons, safety blocks, usage, every error class and
 * cancellation. Errors are checked on the ProviderError's kind (what the router fails over on) and, for
 * a 400, on the provider's own words reaching the caller.
 */

const ask = () => chatRequest([message('user', 'Tell me about Paris.')]);

export async function finishReasons(rig: ContractRig, mode: Mode) {
  rig.script({ type: 'answer', text: 'Paris is lovely.', finish: 'stop' });
  expect((await run(mode, rig, ask())).finishReason).toBe('stop');

  rig.script({ type: 'answer', text: 'Paris is the capital and most', finish: 'length' });
  const cut = await run(mode, rig, chatRequest([message('user', 'Tell me about Paris.')], { maxOutputTokens: 3 }));
  expect(cut.finishReason).toBe('length');

  rig.script({ type: 'answer', toolCalls: [{ id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}' }] });
  const toolChoice = rig.scripted ? undefined : { mode: 'tool', toolName: 'get_weather', disableParallel: false };
  const called = await run(mode, rig, chatRequest([message('user', 'Weather in Paris?')], { tools: [weatherTool], toolChoice }));
  expect(called.finishReason).toBe('tool_calls');
  if (rig.scripted) expect(rig.received()).toHaveLength(3);
}

/** The stop sequence that ended an answer is reported with finish stop. */
export async function stopSequenceReported(rig: ContractRig, mode: Mode) {
  rig.script({ type: 'answer', text: 'Paris is lovely', stopSequence: 'END' });
  const outcome = await run(mode, rig, chatRequest([message('user', 'Tell me about Paris.')], { stop: ['END'] }));
  expect(outcome.finishReason).toBe('stop');
  expect(outcome.stopSequence).toBe('END');
  onlyRequest(rig);
}

export async function safetyBlock(rig: ContractRig, setup: ContractSetup, mode: Mode) {
  rig.script({ type: 'safety' });
  const declared = typeof setup.safety === 'string' ? setup.safety : setup.safety[mode];
  if (declared === 'error') {
    const error = await failureOf(run(mode, rig, ask()));
    expect(error.kind).toBe('content_filter');
    expect(error.retryable).toBe(false);
  } else {
    const outcome = await run(mode, rig, ask());
    expect(outcome.finishReason).toBe('content_filter');
  }
  onlyRequest(rig);
}

export async function usage(rig: ContractRig, setup: ContractSetup, mode: Mode) {
  const scripted: ScriptedUsage = { input: 1_200, cacheRead: 800, cacheWrite: 300, output: 90, reasoning: 40 };
  rig.script({ type: 'answer', text: 'Paris.', usage: scripted });
  const outcome = await run(mode, rig, ask());
  expect(outcome.usage, 'usage reported').toBeDefined();
  const reported = outcome.usage!;
  expect(reported.estimated).toBe(false);
  if (!rig.scripted) {
    expect(reported.inputTokens).toBeGreaterThan(0);
    expect(reported.outputTokens).toBeGreaterThan(0);
    const other = await run(mode === 'chat' ? 'stream' : 'chat', rig, ask());
    expect(other.usage, 'the same answer counts the same, streamed or not').toEqual(reported);
    return;
  }
  expect({
    input: reported.inputTokens,
    cacheRead: reported.cachedInputTokens,
    cacheWrite: reported.cacheWriteTokens,
    output: reported.outputTokens,
    reasoning: reported.reasoningTokens,
  }).toEqual({
    input: scripted.input,
    cacheRead: setup.usage.cacheRead ? scripted.cacheRead : 0,
    cacheWrite: setup.usage.cacheWrite ? scripted.cacheWrite : 0,
    output: scripted.output,
    reasoning: setup.usage.reasoning ? scripted.reasoning : 0,
  });
}

/**
 * Issue 35 item 6: a provider that reports its reasoning tokens beside an output count of 0 (an
 * OpenAI-compatible server's `completion_tokens: 0` with `reasoning_tokens: 40`; Gemini's candidates 0
 * with thoughts 40) did 40 tokens of output: the normalized usage has output 40 (output ≥ reasoning), so
 * it is charged and is no zero completion. A kind that reports no reasoning count reads its output as it is.
 */
export async function usageOfReasoningOnly(rig: ContractRig, setup: ContractSetup, mode: Mode) {
  if (!rig.scripted) return;
  const scripted: ScriptedUsage = { input: 900, cacheRead: 0, cacheWrite: 0, output: 40, reasoning: 40, wireOutput: 0 };
  rig.script({ type: 'answer', text: '', usage: scripted });
  const outcome = await run(mode, rig, ask());
  const reported = outcome.usage!;
  expect({ input: reported.inputTokens, output: reported.outputTokens, reasoning: reported.reasoningTokens }).toEqual({
    input: 900,
    output: setup.usage.reasoning ? 40 : 0,
    reasoning: setup.usage.reasoning ? 40 : 0,
  });
  expect(reported.outputTokens).toBeGreaterThanOrEqual(reported.reasoningTokens);
}

async function failureFor(rig: ContractRig, mode: Mode, answer: ScriptedAnswer): Promise<ProviderError> {
  rig.script(answer);
  const error = await failureOf(run(mode, rig, ask()));
  onlyRequest(rig);
  return error;
}

export async function error400(rig: ContractRig, mode: Mode) {
  const words = 'messages.0.content: the contract suite refuses this (4711)';
  const error = await failureFor(rig, mode, { type: 'error', status: 400, message: words });
  expect(error.kind).toBe('rejected');
  expect(error.retryable).toBe(false);
  expect(error.providerMessage, "the provider's own words reach the caller").toContain(words);
}

export async function badCredentials(rig: ContractRig, mode: Mode) {
  const wrong = rig.adapterWithWrongCredentials();
  let error: ProviderError;
  if (wrong) {
    error = await failureOf(run(mode, { ...rig, adapter: wrong }, ask()));
  } else {
    // The fake checks no key: it answers as the API answers a wrong one.
    error = await failureFor(rig, mode, { type: 'error', status: 401, message: 'Incorrect API key provided: sk-wrong.' });
  }
  expect(error.kind).toBe('misconfigured');
  expect(error.retryable).toBe(true);
}

export async function error429(rig: ContractRig, mode: Mode) {
  const error = await failureFor(rig, mode, { type: 'error', status: 429, message: 'Rate limit reached; slow down.' });
  expect(error.kind).toBe('overloaded');
  expect(error.retryable).toBe(true);
}

export async function error5xx(rig: ContractRig, mode: Mode) {
  for (const status of [500, 503]) {
    rig.reset();
    const error = await failureFor(rig, mode, { type: 'error', status, message: 'The server had an error.' });
    expect(error.kind, `status ${status}`).toBe('overloaded');
    expect(error.retryable).toBe(true);
  }
}

export async function connectionReset(rig: ContractRig, mode: Mode) {
  const error = await failureFor(rig, mode, { type: 'reset' });
  expect(error.kind).toBe('connection');
  expect(error.retryable).toBe(true);
}

/** Waits until the fake has received `count` requests (the adapter's request is in flight). */
async function receivedCount(rig: ContractRig, count: number) {
  const deadline = Date.now() + 5_000;
  while (rig.received().length < count) {
    if (Date.now() > deadline) throw new Error(`the fake received ${rig.received().length} requests, expected ${count}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The connection a request in flight uses; it must be open. */
function openConnection(rig: ContractRig) {
  const connection = rig.watch!.lastActive();
  expect(connection, 'the request went through the watched relay').toBeDefined();
  expect(connection!.closedAt, 'open while the request is in flight').toBeUndefined();
  if (rig.upstreamOpenRequests) expect(rig.upstreamOpenRequests(), 'the fake holds the request open').toBeGreaterThan(0);
  return connection!;
}

/** The upstream sees the request closed within a second of `since`: the relay, and the fake where it counts. */
async function closedWithinOneSecond(rig: ContractRig, connection: ReturnType<typeof openConnection>, since: number) {
  const closedAt = await connection.waitClosed(1_000);
  expect(closedAt, 'the upstream saw the request closed').toBeDefined();
  expect(closedAt! - since).toBeLessThanOrEqual(1_000);
  if (!rig.upstreamOpenRequests) return;
  while (rig.upstreamOpenRequests() > 0 && Date.now() - since <= 1_000) await new Promise((resolve) => setTimeout(resolve, 5));
  expect(rig.upstreamOpenRequests(), 'the fake saw its request closed').toBe(0);
}

/**
 * Aborting the attempt closes the upstream request within a second: mid-stream (pulled or not), or
 * while a whole answer is awaited. Nor does the call then end as if it had completed.
 */
export async function cancellation(rig: ContractRig, mode: Mode) {
  const controller = new AbortController();
  let pending: Promise<unknown>;
  if (mode === 'stream') {
    rig.script({ type: 'slow stream', text: 'Paris has many bridges and museums to visit. '.repeat(12) });
    const iterator = rig.adapter.chatStream(adapterRequest(rig, ask()), controller.signal)[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.done, 'the stream started').toBe(false);
    pending = (async () => {
      for (let next = await iterator.next(); !next.done; next = await iterator.next()) { /* drain */ }
    })();
  } else if (rig.scripted) {
    rig.script({ type: 'stall' });
    pending = rig.adapter.chat(adapterRequest(rig, ask()), controller.signal);
  } else {
    // Without an upstream a whole answer has no moment in flight: an attempt already aborted must not run.
    controller.abort();
    pending = rig.adapter.chat(adapterRequest(rig, ask()), controller.signal);
  }
  // Settled into a value now, so an early rejection is never an unhandled one.
  const outcome = pending.then(() => 'completed', (error: unknown) => error);
  if (mode === 'chat' && rig.scripted) await receivedCount(rig, 1);
  const connection = rig.watch ? openConnection(rig) : undefined;
  const abortedAt = Date.now();
  controller.abort();
  if (connection) await closedWithinOneSecond(rig, connection, abortedAt);
  expect(await outcome, 'an aborted call does not complete').not.toBe('completed');
  if (rig.scripted) expect(rig.received()).toHaveLength(1);
}

/** The attempt's deadline passes while the provider says nothing: a timeout (fails over), the request closed. */
export async function timeout(rig: ContractRig, mode: Mode) {
  rig.script({ type: 'stall' });
  const signal = AbortSignal.timeout(1_000);
  const pending = failureOf(run(mode, rig, ask(), signal));
  await receivedCount(rig, 1);
  const connection = openConnection(rig);
  const error = await pending;
  const firedAt = Date.now();
  expect(error.kind).toBe('timeout');
  expect(error.retryable).toBe(true);
  await closedWithinOneSecond(rig, connection, firedAt);
}

/** A stream whose connection drops before it finished fails (never ends as a complete answer). */
export async function streamCut(rig: ContractRig) {
  rig.script({ type: 'cut stream', text: 'Paris is the capital of France and its largest city.' });
  const error = await failureOf(run('stream', rig, ask()));
  expect(error.kind).toBe('connection');
  expect(error.retryable).toBe(true);
  onlyRequest(rig);
}

/** The provider's in-band overload error mid-stream is a retryable failure, not a clean end. */
export async function streamErrorEvent(rig: ContractRig) {
  rig.script({ type: 'stream error', text: 'Paris is the capital of France and its largest city.' });
  const error = await failureOf(run('stream', rig, ask()));
  expect(error.kind).toBe('overloaded');
  expect(error.retryable).toBe(true);
  onlyRequest(rig);
}
