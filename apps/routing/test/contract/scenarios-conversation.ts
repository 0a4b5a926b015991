import { expect } from 'vitest';
import type { ContentPart, ReasoningPart } from '@gateway/proto';
import { PARAMETERS } from '@gateway/platform';
import { minimalPdf } from '@gateway/testing';
import { stripForeignReasoning } from '../../src/routing/reasoning-provenance.js';
import {
  chatRequest, failureOf, message, onlyRequest, ONE_PIXEL_PNG_BASE64, run, text, timeParameters, timeTool, weatherParameters,
  weatherTool, type Mode,
} from './contract-requests.js';
import type { AttemptSignal } from '../../src/providers/provider-adapter.js';
import { wireOf } from '../../src/providers/upstream-wire.js';
import type { ContractRig, ContractSetup } from './contract-types.js';
import { CONTRACT_HEADERS } from './setups/common.js';

/*
 * The scenarios about what goes to the provider and what comes back: text, system prompt, tools, media,
 * structured output, reasoning provenance. Each scripts the fake, runs the adapter (chat or stream) and
 * checks both the answer and what the fake received, so none can pass without the provider taking part.
 */

export async function plainText(rig: ContractRig, mode: Mode) {
  const answer = 'Paris is the capital of France.';
  const prompt = 'What is the capital of France?';
  rig.script({ type: 'answer', text: answer });
  const outcome = await run(mode, rig, chatRequest([message('user', prompt)]));
  expect(outcome.finishReason).toBe('stop');
  expect(outcome.toolCalls).toEqual([]);
  if (mode === 'stream') expect(outcome.deltas, 'the answer arrives in pieces').toBeGreaterThan(1);
  if (!rig.scripted) {
    expect(outcome.content).toContain(prompt.slice(0, 20));
    return;
  }
  expect(outcome.content).toBe(answer);
  const request = onlyRequest(rig);
  expect(rig.reader.streamed(request)).toBe(mode === 'stream');
  expect(rig.reader.model(request)).toBe(rig.upstreamModel);
  expect(rig.reader.allText(request)).toContain(prompt);
}

/** The catalog's static `headers` reach the provider on every request, streamed or not. */
export async function staticHeaders(rig: ContractRig, mode: Mode) {
  rig.script({ type: 'answer', text: 'Paris.' });
  await run(mode, rig, chatRequest([message('user', 'Capital of France?')]));
  const request = onlyRequest(rig);
  for (const [name, value] of Object.entries(CONTRACT_HEADERS)) expect(request.headers[name], name).toBe(value);
}

export async function systemPrompt(rig: ContractRig, mode: Mode) {
  const instruction = 'Answer in exactly one word. (contract marker 7f3a)';
  rig.script({ type: 'answer', text: 'Paris.' });
  const outcome = await run(mode, rig, chatRequest([message('system', instruction), message('user', 'Capital of France?')]));
  expect(outcome.content).toBe('Paris.');
  expect(rig.reader.systemText(onlyRequest(rig))).toContain(instruction);
}

/** Temperature, the output bound and stop sequences reach the provider under its own names. */
export async function generationParameters(rig: ContractRig, mode: Mode) {
  rig.script({ type: 'answer', text: 'Paris.' });
  await run(mode, rig, chatRequest([message('user', 'Capital of France?')], { temperature: 0.25, maxOutputTokens: 321, stop: ['END', '###'] }));
  expect(rig.reader.generation(onlyRequest(rig))).toEqual({ temperature: 0.25, maxTokens: 321, stop: ['END', '###'] });
}

/**
 * Logprobs (issue 37 item 6): a kind either carries them back (the tokens spell the answer, each with
 * its UTF-8 bytes and the asked number of alternatives) or names `logprobs` and `top_logprobs` as
 * unsent (the answer's dropped_params); never neither.
 */
export async function logprobsCarriedOrNamed(rig: ContractRig, mode: Mode) {
  const answer = 'Paris is the capital.';
  rig.script({ type: 'answer', text: answer });
  const named: string[] = [];
  const signal: AttemptSignal = Object.assign(new AbortController().signal, { parametersUnsent: (names: readonly string[]) => { named.push(...names); } });
  const outcome = await run(mode, rig, chatRequest([message('user', 'Capital of France?')], { logprobs: true, topLogprobs: 2 }), signal);
  // Which of the two is the parameter table's word for this kind (docs/providers.md is generated from it).
  const tableNames = PARAMETERS.logprobs.wires[wireOf(rig.adapter.kind, rig.upstreamModel)] === false;
  expect(named.includes('logprobs'), `the table says ${tableNames ? 'named' : 'sent'}`).toBe(tableNames);
  if (tableNames) {
    expect(named).toContain('top_logprobs');
    expect(outcome.logprobs).toEqual([]);
    return;
  }
  expect(named).not.toContain('top_logprobs');
  expect(outcome.content).toBe(answer);
  const entries = outcome.logprobs.flatMap((json) => (JSON.parse(json) as { content: { token: string; bytes: number[]; logprob: number; top_logprobs: unknown[] }[] }).content);
  expect(entries.map((entry) => entry.token).join('')).toBe(answer);
  for (const entry of entries) {
    expect(entry.bytes).toEqual([...Buffer.from(entry.token, 'utf8')]);
    expect(typeof entry.logprob).toBe('number');
    expect(entry.top_logprobs).toHaveLength(2);
  }
}

/** Earlier turns reach the provider in order, each under its role, after the system prompt. */
export async function conversationHistory(rig: ContractRig, mode: Mode) {
  const history = [
    message('system', 'You are a geography tutor.'),
    message('user', 'Capital of France?'),
    message('assistant', 'Paris.'),
    message('user', 'And of Germany?'),
  ];
  rig.script({ type: 'answer', text: 'Berlin.' });
  const outcome = await run(mode, rig, chatRequest(history));
  expect(outcome.content).toBe('Berlin.');
  const request = onlyRequest(rig);
  expect(rig.reader.systemText(request)).toContain('You are a geography tutor.');
  expect(rig.reader.turns(request)).toEqual([
    { role: 'user', text: 'Capital of France?' },
    { role: 'assistant', text: 'Paris.' },
    { role: 'user', text: 'And of Germany?' },
  ]);
}

export async function toolDefinitionsAndChoice(rig: ContractRig, mode: Mode) {
  const call = { id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}' };
  const tools = [weatherTool, timeTool];
  const ask = [message('user', 'Weather in Paris?')];

  rig.script({ type: 'answer', toolCalls: [call] });
  await run(mode, rig, chatRequest(ask, { tools, toolChoice: { mode: 'tool', toolName: 'get_weather', disableParallel: false } }));
  const forced = onlyRequest(rig);
  const sent = rig.reader.tools(forced);
  expect(sent.map((tool) => tool.name)).toEqual(['get_weather', 'get_time']);
  expect(sent[0]!.parameters).toMatchObject(weatherParameters);
  expect(sent[1]!.parameters).toMatchObject(timeParameters);
  expect(rig.reader.toolChoice(forced)).toEqual({ name: 'get_weather' });

  rig.reset();
  rig.script({ type: 'answer', toolCalls: [call] });
  await run(mode, rig, chatRequest(ask, { tools, toolChoice: { mode: 'required', toolName: '', disableParallel: false } }));
  expect(rig.reader.toolChoice(onlyRequest(rig))).toBe('required');
}

export async function toolCallAnswer(rig: ContractRig, mode: Mode, parallel: boolean) {
  const calls = [
    { id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { id: 'call_t1', name: 'get_time', arguments: '{"zone":"Europe/Paris"}' },
  ].slice(0, parallel ? 2 : 1);
  rig.script({ type: 'answer', toolCalls: calls });
  const forced = rig.scripted ? undefined : { mode: 'tool', toolName: 'get_weather', disableParallel: false };
  const outcome = await run(mode, rig, chatRequest([message('user', 'Weather and time in Paris?')], { tools: [weatherTool, timeTool], toolChoice: forced }));
  expect(outcome.finishReason).toBe('tool_calls');
  expect(outcome.toolCalls.map((call) => call.name)).toEqual(calls.map((call) => call.name));
  for (const call of outcome.toolCalls) expect(call.id, 'every call has an id the result can name').not.toBe('');
  expect(new Set(outcome.toolCalls.map((call) => call.id)).size).toBe(calls.length);
  if (!rig.scripted) {
    // The simulator fills the schema: an object with the required string.
    expect(JSON.parse(outcome.toolCalls[0]!.arguments)).toEqual({ city: expect.any(String) });
    return;
  }
  expect(outcome.toolCalls.map((call) => JSON.parse(call.arguments))).toEqual(calls.map((call) => JSON.parse(call.arguments)));
  expect(rig.reader.streamed(onlyRequest(rig))).toBe(mode === 'stream');
}

export async function toolRoundTrip(rig: ContractRig, mode: Mode, parallel: boolean) {
  const calls = [
    { id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}', result: '{"temp_c":18,"sky":"clear"}' },
    { id: 'call_t1', name: 'get_time', arguments: '{"zone":"Europe/Paris"}', result: '{"time":"14:05"}' },
  ].slice(0, parallel ? 2 : 1);
  const history = [
    message('user', 'Weather and time in Paris?'),
    message('assistant', '', { toolCalls: calls.map(({ id, name, arguments: args }) => ({ id, name, arguments: args })) }),
    ...calls.map((call) => message('tool', call.result, { toolCallId: call.id })),
  ];
  const answer = 'It is 18 °C and clear in Paris.';
  rig.script({ type: 'answer', text: answer });
  const outcome = await run(mode, rig, chatRequest(history, { tools: [weatherTool, timeTool] }));
  expect(outcome.finishReason).toBe('stop');
  expect(outcome.toolCalls).toEqual([]);
  if (!rig.scripted) {
    expect(outcome.content).not.toBe('');
    return;
  }
  expect(outcome.content).toBe(answer);
  const request = onlyRequest(rig);
  const sentCalls = rig.reader.toolCallsSentBack(request);
  expect(sentCalls.map((call) => [call.name, call.arguments])).toEqual(calls.map((call) => [call.name, JSON.parse(call.arguments)]));
  const results = rig.reader.toolResults(request);
  expect(results).toHaveLength(calls.length);
  results.forEach((result, index) => {
    expect(result.ref, 'each result names the call it answers').toBe(sentCalls[index]!.ref);
    expect(JSON.parse(result.content)).toEqual(JSON.parse(calls[index]!.result));
  });
}

/** A tool result flagged as the tool's failure reaches the provider flagged, with its text. */
export async function toolErrorResult(rig: ContractRig, mode: Mode) {
  const history = [
    message('user', 'Weather in Atlantis?'),
    message('assistant', '', { toolCalls: [{ id: 'call_w1', name: 'get_weather', arguments: '{"city":"Atlantis"}' }] }),
    message('tool', '{"message":"unknown city: Atlantis"}', { toolCallId: 'call_w1', isError: true }),
  ];
  rig.script({ type: 'answer', text: 'I could not find Atlantis.' });
  const outcome = await run(mode, rig, chatRequest(history, { tools: [weatherTool] }));
  expect(outcome.content).toBe('I could not find Atlantis.');
  const results = rig.reader.toolResults(onlyRequest(rig));
  expect(results).toHaveLength(1);
  expect(results[0]!.isError).toBe(true);
  expect(JSON.parse(results[0]!.content)).toEqual({ message: 'unknown city: Atlantis' });
}

async function mediaInput(rig: ContractRig, mode: Mode, part: ContentPart, mediaType: string, base64: string) {
  rig.script({ type: 'answer', text: 'Understood.' });
  const outcome = await run(mode, rig, chatRequest([message('user', [text('What does this show?'), part])]));
  expect(outcome.content).toBe('Understood.');
  expect(rig.reader.inlineMedia(onlyRequest(rig))).toContainEqual({ mediaType, base64 });
}

export function imageInput(rig: ContractRig, mode: Mode) {
  const url = `data:image/png;base64,${ONE_PIXEL_PNG_BASE64}`;
  return mediaInput(rig, mode, { part: { $case: 'image', value: { url, detail: '' } } }, 'image/png', ONE_PIXEL_PNG_BASE64);
}

/** An image by link goes to the provider as that link (where the API takes links). */
export async function imageUrlInput(rig: ContractRig, mode: Mode) {
  const url = 'https://images.example.com/photos/eiffel-tower.png';
  rig.script({ type: 'answer', text: 'The Eiffel Tower.' });
  const outcome = await run(mode, rig, chatRequest([message('user', [text('What is this?'), { part: { $case: 'image', value: { url, detail: '' } } }])]));
  expect(outcome.content).toBe('The Eiffel Tower.');
  expect(rig.reader.imageUrls(onlyRequest(rig))).toEqual([url]);
}

export function pdfInput(rig: ContractRig, mode: Mode) {
  const pdf = minimalPdf(['Quarterly revenue: 4.2 million']);
  const part: ContentPart = { part: { $case: 'file', value: { filename: 'quarterly', data: pdf, url: '', mediaType: 'application/pdf', context: '', fileId: '' } } };
  return mediaInput(rig, mode, part, 'application/pdf', pdf.toString('base64'));
}

const CITY_SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' }, population: { type: 'integer' } },
  required: ['city', 'population'],
  additionalProperties: false,
};

export async function jsonSchemaOutput(rig: ContractRig, setup: ContractSetup, mode: Mode) {
  const responseFormat = { type: 'json_schema', schemaName: 'city_facts', schema: JSON.stringify(CITY_SCHEMA), strict: true };
  const ask = [message('user', 'Facts about Paris.')];
  rig.script({ type: 'answer', text: '{"city":"Paris","population":2102650}' });
  const outcome = await run(mode, rig, chatRequest(ask, { responseFormat }));
  expect(outcome.finishReason).toBe('stop');
  const value = JSON.parse(outcome.content);
  if (!rig.scripted) {
    expect(value).toEqual({ city: expect.any(String), population: expect.any(Number) });
    expect(Number.isInteger(value.population)).toBe(true);
    return;
  }
  expect(value).toEqual({ city: 'Paris', population: 2102650 });
  const request = onlyRequest(rig);
  if (setup.jsonSchema === 'native') {
    expect(rig.reader.nativeSchema(request)).toMatchObject({ properties: CITY_SCHEMA.properties, required: CITY_SCHEMA.required });
    return;
  }
  // Instructed: the schema travels in the prompt, and an answer that breaks it is a broken answer.
  expect(rig.reader.nativeSchema(request)).toBeUndefined();
  expect(rig.reader.allText(request)).toContain(JSON.stringify(CITY_SCHEMA));
  rig.reset();
  rig.script({ type: 'answer', text: '{"city":"Paris"}' });
  const broken = await failureOf(run(mode, rig, chatRequest(ask, { responseFormat })));
  expect(broken.kind).toBe('connection');
  expect(broken.retryable).toBe(true);
}

/**
 * Reasoning comes back with the provider's signature, tagged with this provider; sent back to it, the
 * signatures arrive on the wire; tagged with another provider, the router's strip (reasoning-provenance.ts,
 * keyed by provider id) leaves nothing of them on the wire. A provider may split its reasoning into
 * several parts (Gemini signs parts: a thought, then the answer's text); together they must hold the
 * thinking text and at least one signature, and what reaches the wire is the provider's own signature
 * (the canonical value may wrap it, so the wire value is looked for inside it).
 */
export async function reasoningProvenance(rig: ContractRig, mode: Mode) {
  const thinking = 'The capital of France is Paris; one word will do.';
  const think = { thinkingBudgetTokens: 2_048, maxOutputTokens: 4_096, reasoningEffort: 'medium' };
  const question = message('user', 'Capital of France? Think first.');
  rig.script({ type: 'answer', reasoning: thinking, text: 'Paris.' });
  const first = await run(mode, rig, chatRequest([question], think));
  expect(first.content).toBe('Paris.');
  const issued = first.reasoning;
  expect(issued.map((part) => part.text).join('')).toBe(thinking);
  expect(issued.filter((part) => part.signature !== ''), 'signed by the provider').not.toHaveLength(0);
  for (const part of issued) expect(part.providerId).toBe(rig.providerId);
  const signatures = issued.map((part) => part.signature).filter((signature) => signature !== '');

  const history = (reasoning: ReasoningPart[]) => [question, message('assistant', 'Paris.', { reasoning }), message('user', 'And of Germany?')];

  rig.reset();
  rig.script({ type: 'answer', text: 'Berlin.' });
  const kept = await run(mode, rig, chatRequest(stripForeignReasoning(history(issued), rig.providerId), think));
  expect(kept.content).toBe('Berlin.');
  const sent = rig.reader.reasoningSent(onlyRequest(rig)).map((part) => part.signature);
  expect(sent, 'the signatures went back to their provider').not.toHaveLength(0);
  for (const signature of sent) expect(signatures.some((canonical) => canonical.includes(signature)), signature).toBe(true);

  rig.reset();
  rig.script({ type: 'answer', text: 'Berlin.' });
  const foreign = issued.map((part) => ({ ...part, providerId: 'another-provider' }));
  const stripped = await run(mode, rig, chatRequest(stripForeignReasoning(history(foreign), rig.providerId), think));
  expect(stripped.content).toBe('Berlin.');
  const request = onlyRequest(rig);
  expect(rig.reader.reasoningSent(request)).toEqual([]);
  for (const signature of sent) expect(JSON.stringify(request.body)).not.toContain(signature);
}

/** Prompt-cache marks (messages `cache_control`, with ttl) reach the provider at the blocks they end. */
export async function promptCacheMarks(rig: ContractRig, mode: Mode) {
  const hour = { type: 'ephemeral', ttl: '1h' };
  const fiveMinutes = { type: 'ephemeral', ttl: '5m' };
  const manual = 'Reference manual. '.repeat(200);
  const history = [
    message('system', [{ part: { $case: 'text', value: 'You answer questions about the manual.' }, cacheControl: hour }]),
    message('user', [{ part: { $case: 'text', value: manual }, cacheControl: fiveMinutes }, text('What does chapter 2 say?')]),
  ];
  rig.script({ type: 'answer', text: 'Chapter 2 covers installation.' });
  const outcome = await run(mode, rig, chatRequest(history));
  expect(outcome.content).toBe('Chapter 2 covers installation.');
  expect(rig.reader.cacheMarks(onlyRequest(rig))).toEqual(['1h', '5m']);
}

/**
 * Reasoning that came with a tool call goes back with the call (Claude wants its thinking block first in
 * the turn, Gemini 3 the call's own signature); for another provider it is stripped and the request must
 * still be one the provider accepts.
 */
export async function reasoningWithToolCalls(rig: ContractRig, mode: Mode) {
  const thinking = 'The user wants the weather: call get_weather for Paris.';
  const think = { thinkingBudgetTokens: 2_048, maxOutputTokens: 4_096, reasoningEffort: 'medium', tools: [weatherTool] };
  const question = message('user', 'Weather in Paris? Think first.');
  rig.script({ type: 'answer', reasoning: thinking, toolCalls: [{ id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}' }] });
  const first = await run(mode, rig, chatRequest([question], think));
  expect(first.finishReason).toBe('tool_calls');
  expect(first.toolCalls.map((call) => call.name)).toEqual(['get_weather']);
  expect(first.reasoning.map((part) => part.text).join('')).toBe(thinking);
  const signatures = first.reasoning.map((part) => part.signature).filter((signature) => signature !== '');
  expect(signatures, 'signed by the provider').not.toHaveLength(0);

  // The history as if `issuer` had answered: its reasoning and its calls' own signatures (Gemini) are that provider's.
  const history = (reasoning: ReasoningPart[], issuer: string) => [
    question,
    message('assistant', '', { toolCalls: first.toolCalls.map((call) => (call.signature ? { ...call, signatureProviderId: issuer } : call)), reasoning }),
    message('tool', '{"temp_c":18}', { toolCallId: first.toolCalls[0]!.id }),
  ];
  for (const issuer of [rig.providerId, 'another-provider']) {
    rig.reset();
    rig.script({ type: 'answer', text: 'It is 18 °C in Paris.' });
    const reasoning = first.reasoning.map((part) => ({ ...part, providerId: issuer }));
    const outcome = await run(mode, rig, chatRequest(stripForeignReasoning(history(reasoning, issuer), rig.providerId), think));
    expect(outcome.content, `reasoning issued by ${issuer}`).toBe('It is 18 °C in Paris.');
    const request = onlyRequest(rig);
    expect(rig.reader.toolResults(request)).toHaveLength(1);
    const sent = rig.reader.reasoningSent(request).map((part) => part.signature);
    if (issuer === rig.providerId) {
      expect(sent, 'the signatures went back with the call').not.toHaveLength(0);
      for (const signature of sent) expect(signatures.some((canonical) => canonical.includes(signature)), signature).toBe(true);
    } else {
      expect(sent).toEqual([]);
    }
  }
}

/** Redacted (encrypted) reasoning goes back, byte for byte, only to the provider that issued it. */
export async function redactedReasoning(rig: ContractRig, mode: Mode) {
  const think = { thinkingBudgetTokens: 2_048, maxOutputTokens: 4_096, reasoningEffort: 'medium' };
  const question = message('user', 'Capital of France? Think first.');
  rig.script({ type: 'answer', redactedReasoning: true, text: 'Paris.' });
  const first = await run(mode, rig, chatRequest([question], think));
  expect(first.content).toBe('Paris.');
  const redacted = first.reasoning.filter((part) => part.encryptedData !== '');
  expect(redacted, 'one redacted reasoning part').toHaveLength(1);
  expect(redacted[0]!.providerId).toBe(rig.providerId);

  for (const issuer of [rig.providerId, 'another-provider']) {
    rig.reset();
    rig.script({ type: 'answer', text: 'Berlin.' });
    const reasoning = redacted.map((part) => ({ ...part, providerId: issuer }));
    const history = [question, message('assistant', 'Paris.', { reasoning }), message('user', 'And of Germany?')];
    const outcome = await run(mode, rig, chatRequest(stripForeignReasoning(history, rig.providerId), think));
    expect(outcome.content).toBe('Berlin.');
    const request = onlyRequest(rig);
    const sent = rig.reader.redactedReasoningSent(request);
    if (issuer === rig.providerId) {
      expect(sent).toEqual([redacted[0]!.encryptedData]);
    } else {
      expect(sent).toEqual([]);
      expect(JSON.stringify(request.body)).not.toContain(redacted[0]!.encryptedData);
    }
  }
}
