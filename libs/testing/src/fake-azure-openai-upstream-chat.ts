import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { answerChatCompletion, approximateTokens, fakeLogprobs, sendChunksWithFaults, splitText, toolCallPieces } from './fake-upstream-support.js';
import type { FakeBehaviour } from './fake-upstream-types.js';

// The chat and embeddings answers of the fake Azure OpenAI resource: the OpenAI wire format with what
// Azure adds to it (content-filter annotations on the prompt and every choice, a first stream chunk with
// empty `choices` that carries only `prompt_filter_results`, output filtering with `content_filter`).

/** Scripted usage: the OpenAI fake's counters plus cached and reasoning tokens. */
export interface FakeAzureUsage {
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens?: number;
  reasoning_tokens?: number;
}

/** One scripted answer of the fake Azure OpenAI resource. */
export interface FakeAzureBehaviour extends Omit<FakeBehaviour, 'usage' | 'replay'> {
  usage?: 'absent' | FakeAzureUsage;
  /**
   * Azure's content filter: `prompt` refuses the request with 400 `content_filter` (as Azure does when the
   * prompt is flagged); `output` lets the answer start and then withholds it, finishing with
   * `finish_reason: content_filter` (non-streamed: no content at all; streamed: after
   * `filterAfterChunks` content chunks, default 1).
   */
  contentFilter?: 'prompt' | 'output';
  filterAfterChunks?: number;
  /** Leave out the stream's first `prompt_filter_results` chunk (older api-versions sent none). */
  noPromptFilterChunk?: boolean;
}

const DEFAULT_TEXT = 'Hello from the fake Azure OpenAI resource.';
const SAFE = { filtered: false, severity: 'safe' };
const SAFE_RESULTS = { hate: SAFE, self_harm: SAFE, sexual: SAFE, violence: SAFE };
const VIOLENT_RESULTS = { ...SAFE_RESULTS, violence: { filtered: true, severity: 'high' } };
const PROMPT_FILTER_RESULTS = [{ prompt_index: 0, content_filter_results: { ...SAFE_RESULTS, jailbreak: { filtered: false, detected: false } } }];

/** The 400 Azure answers a prompt its content filter blocked with (Azure OpenAI content filtering docs). */
export function azurePromptFilteredBody() {
  return {
    error: {
      message:
        "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
      type: null,
      param: 'prompt',
      code: 'content_filter',
      status: 400,
      innererror: { code: 'ResponsibleAIPolicyViolation', content_filter_result: VIOLENT_RESULTS },
    },
  };
}

function promptText(body: any): string {
  const messages = Array.isArray(body?.messages) ? body.messages : [];
  return messages
    .map((message: any) => (typeof message?.content === 'string' ? message.content : Array.isArray(message?.content) ? message.content.map((part: any) => part?.text ?? '').join('') : ''))
    .join('\n');
}

function usageFor(body: any, behaviour: FakeAzureBehaviour, text: string) {
  if (behaviour.usage === 'absent') return undefined;
  const promptTokens = behaviour.usage?.prompt_tokens ?? approximateTokens(promptText(body));
  const completionTokens = behaviour.usage?.completion_tokens ?? approximateTokens(text);
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: behaviour.usage?.cached_tokens ?? 0, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: behaviour.usage?.reasoning_tokens ?? 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
  };
}

/** POST chat/completions: JSON, or SSE when `stream` is true. `model` is what Azure reports (the deployment's model). */
export async function fakeAzureChat(body: any, model: string, behaviour: FakeAzureBehaviour, response: ServerResponse, socket: Socket, sequence: number): Promise<void> {
  const id = `chatcmpl-azure${sequence}`;
  const createdAt = Math.floor(Date.now() / 1000);
  const filtered = behaviour.contentFilter === 'output';
  const toolCalls = filtered ? [] : (behaviour.toolCalls ?? []);
  const fullText = toolCalls.length > 0 && !behaviour.text ? '' : (behaviour.text ?? DEFAULT_TEXT);
  const finishReason = filtered ? 'content_filter' : (behaviour.finishReason ?? (toolCalls.length > 0 ? 'tool_calls' : 'stop'));
  const usage = usageFor(body, behaviour, fullText);
  // Logprobs as Azure OpenAI answers them (the OpenAI shape), only when asked.
  const wantsLogprobs = body?.logprobs === true;
  const topLogprobs = typeof body?.top_logprobs === 'number' ? body.top_logprobs : 0;
  const logprobsOf = (text: string) => (wantsLogprobs ? { logprobs: { content: fakeLogprobs(text, topLogprobs), refusal: null } } : {});

  if (!body?.stream) {
    answerChatCompletion(response, id, createdAt, model, {
      prompt_filter_results: PROMPT_FILTER_RESULTS,
      choices: [{
        index: 0,
        // A filtered answer carries no content: Azure withholds it.
        message: {
          role: 'assistant',
          ...(filtered ? {} : { content: toolCalls.length > 0 && !behaviour.text ? null : fullText }),
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls.map((call) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } })) } : {}),
        },
        finish_reason: finishReason,
        ...logprobsOf(filtered ? '' : fullText),
        content_filter_results: filtered ? VIOLENT_RESULTS : SAFE_RESULTS,
      }],
      system_fingerprint: 'fp_azure_fake',
      ...(usage ? { usage } : {}),
    });
    return;
  }

  response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  response.flushHeaders();
  const send = (chunk: unknown) => new Promise<void>((resolve) => { response.write(`data: ${JSON.stringify(chunk)}\n\n`, () => resolve()); });
  const frame = (delta: unknown, finish: string | null = null, filter: unknown = SAFE_RESULTS) => ({
    id, object: 'chat.completion.chunk', created: createdAt, model, system_fingerprint: 'fp_azure_fake',
    choices: [{
      index: 0, delta, finish_reason: finish, content_filter_results: filter,
      ...(typeof (delta as { content?: unknown }).content === 'string' ? logprobsOf((delta as { content: string }).content) : {}),
    }],
  });
  // Azure's first chunk: nothing but the prompt's filter verdict, with empty id, model and choices.
  if (!behaviour.noPromptFilterChunk) await send({ choices: [], created: 0, id: '', model: '', object: '', prompt_filter_results: PROMPT_FILTER_RESULTS });
  await send(frame({ role: 'assistant', content: '' }, null, {}));

  const contentChunks = splitText(fullText, behaviour.chunkCount ?? 3);
  const pieces: unknown[] = (filtered ? contentChunks.slice(0, behaviour.filterAfterChunks ?? 1) : contentChunks).map((content) => frame({ content }));
  pieces.push(...toolCallPieces(toolCalls, frame));
  if (!await sendChunksWithFaults(pieces, behaviour, send, socket, response, 'The server had an error processing your request.')) return;
  await send(frame({}, finishReason, filtered ? VIOLENT_RESULTS : SAFE_RESULTS));
  if (usage && body?.stream_options?.include_usage) await send({ id, object: 'chat.completion.chunk', created: createdAt, model, choices: [], usage });
  response.write('data: [DONE]\n\n');
  response.end();
}

/** POST embeddings: deterministic vectors (`dimensions` long, default 8) in input order. */
export function fakeAzureEmbeddings(body: any, model: string, behaviour: FakeAzureBehaviour, response: ServerResponse): void {
  const inputs: unknown[] = Array.isArray(body?.input) ? body.input : [body?.input ?? ''];
  const dimensions = typeof body?.dimensions === 'number' ? body.dimensions : 8;
  const data = inputs.map((input, index) => {
    const seed = JSON.stringify(input);
    return { object: 'embedding', index, embedding: Array.from({ length: dimensions }, (_, position) => ((seed.charCodeAt(position % Math.max(1, seed.length)) || 0) % 89) / 89) };
  });
  const promptTokens = inputs.reduce<number>((sum, input) => sum + approximateTokens(JSON.stringify(input)), 0);
  response.writeHead(200, { 'content-type': 'application/json' });
  response.end(JSON.stringify({ object: 'list', data, model, ...(behaviour.usage === 'absent' ? {} : { usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } }) }));
}
