import type { ChatStreamDelta, ChatStreamStart, Pricing, ToolCallDelta, Usage } from '@gateway/proto';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { boundedMessage, boundedParam, type ApiError } from '../../errors.js';
import type { AnswerContext, StreamWriter } from '../../inference/dialect.js';
import { chatAnswerCost } from '../../inference/answer-cost.js';
import { compactionItem, compactionItemId } from './compaction.js';
import { deltaLogprobs, outputTextLogprobs, type TextLogprob } from './responses-logprobs.js';
import { idBase, itemId, reasoningItem, renderUsage, responseId, responseSettings, statusOf, toolCallItem, toolCallPrefix, type ResponseStatus } from './render-responses.js';
import type { ResponsesRequest } from './responses-schema.js';
import { customInputOf, dialectToolOf, toolSetOf, type ResponsesToolSet } from './responses-tools.js';

/*
 * The responses event stream (wire-formats.md "OpenAI Responses"): every event an `event:` line and a
 * JSON `data:` line with its `type` and a `sequence_number` counting from 0. Output items follow the
 * canonical stream in the order their content arrives; each is opened (output_item.added, its part),
 * filled with deltas as they come (never buffered), and closed (its .done events, output_item.done)
 * when content of another item starts or the stream ends. The response object the lifecycle events
 * carry is built as text around the request settings, serialized once per stream.
 *
 * A custom tool's call is the one exception to "never buffered": the provider streams the arguments of
 * a function (`{"input": "…"}`), and the `custom_tool_call_input` events carry the decoded input, so
 * its input goes out in one delta when the call closes.
 *
 * An in-band compaction (compaction.ts) streams no content: the provider's summary is gathered, then
 * sealed into the one compaction item, announced (output_item.added, output_item.done) at the end.
 */

interface ReasoningState {
  kind: 'reasoning';
  outputIndex: number;
  id: string;
  text: string;
  signature: string;
  encrypted: string;
  /** Whether the summary part was announced (the first text opens it; encrypted-only reasoning has none). */
  partOpen: boolean;
}

interface MessageState {
  kind: 'message';
  outputIndex: number;
  id: string;
  text: string;
  /** The output text's logprobs so far (only a request that asked for them gets any). */
  logprobs?: TextLogprob[];
}

interface FunctionCallState {
  kind: 'function_call';
  outputIndex: number;
  id: string;
  callId: string;
  /** The canonical (flat) name the provider called. */
  name: string;
  arguments: string;
  /** A custom tool's call (custom_tool_call events), decided by the name the call opened with. */
  custom: boolean;
}

type ItemState = ReasoningState | MessageState | FunctionCallState;

/** A message's output_text part, with its logprobs when the request asked for them. */
function outputTextPart(state: MessageState): string {
  const logprobs = state.logprobs ? `,"logprobs":${json(state.logprobs)}` : '';
  return `{"type":"output_text","text":${json(state.text)},"annotations":[]${logprobs}}`;
}

/**
 * `response.failed` carries an `error.code` the SDK types as one of a fixed list; the gateway's own
 * code (and param) go in the `error` event that follows.
 */
function responseErrorCode(status: number): string {
  if (status === 429) return 'rate_limit_exceeded';
  if (status >= 400 && status < 500) return 'invalid_prompt';
  return 'server_error';
}

const json = JSON.stringify;

/** A background response's stream (render-background-stream.ts): its objects say `background: true`, its numbering continues an earlier writer's, and events up to `after` are counted but not written. */
export interface BackgroundStreamOptions {
  firstSequence: number;
  after: number;
}

export class ResponsesStreamWriter implements StreamWriter {
  private sequence = 0;
  private providerId = '';
  private finishReason = '';
  /** The serving model's prices from the Router's start (the usage event's), for usage.cost; then the catalog's. */
  private prices: Pricing | undefined;
  private readonly pricing: Pricing | undefined;
  private current: ItemState | undefined;
  /** Logprobs that came before the text they score (a chunk of only logprobs). */
  private pendingLogprobs: TextLogprob[] | undefined = undefined;
  /** The JSON text of each output item, by output index (an open item's is filled when it closes). */
  private readonly outputJson: string[] = [];
  /** Function call items by the canonical call index, for a late delta of a call already closed. */
  private readonly calls = new Map<number, FunctionCallState>();
  private readonly base: string;
  private readonly idJson: string;
  private readonly modelJson: string;
  /** The request settings of the response object, as JSON members (no braces). */
  private readonly settingsJson: string;
  private readonly tags: ReasoningTags;
  private readonly createdAt: number;
  private readonly toolSet: ResponsesToolSet;
  /** The summary so far of an in-band compaction (its output is only the sealed item). */
  private summary = '';
  /** The response object of a stream that ended (response.completed or .incomplete), as JSON text: what a stored response keeps. */
  terminalResponse: string | undefined = undefined;
  /** Called with terminalResponse as the stream ends (a stored response is queued for the store then, not once its usage is confirmed). */
  onTerminal: ((response: string) => void) | undefined = undefined;

  private readonly background: boolean;
  private readonly after: number;

  constructor(
    answerContext: AnswerContext,
    body: ResponsesRequest,
    private readonly compaction = false,
    background?: BackgroundStreamOptions,
  ) {
    this.background = background !== undefined;
    this.sequence = background?.firstSequence ?? 0;
    this.after = background?.after ?? -1;
    this.base = idBase(answerContext.requestId);
    this.idJson = json(responseId(answerContext.requestId));
    this.modelJson = json(answerContext.model.id);
    this.settingsJson = json(responseSettings(body)).slice(1, -1);
    this.tags = answerContext.tags;
    this.pricing = answerContext.model.model.pricing;
    this.createdAt = answerContext.created;
    this.toolSet = toolSetOf(body);
  }

  start(start: ChatStreamStart): void {
    this.providerId = start.providerId;
    this.prices = start.prices;
  }

  open(): string {
    const response = this.response('in_progress', null, 'null', 'null', '', 'null');
    return this.event('response.created', `"response":${response}`) + this.event('response.in_progress', `"response":${response}`);
  }

  /** The number the next event gets. */
  get nextSequence(): number {
    return this.sequence;
  }

  /** A background response's lifecycle event without output: `response.created` (queued) or `response.in_progress` (an attempt began). */
  lifecycle(type: 'response.created' | 'response.in_progress', status: 'queued' | 'in_progress'): string {
    return this.event(type, `"response":${this.response(status, null, 'null', 'null', '', 'null')}`);
  }

  delta(delta: ChatStreamDelta): string {
    if (this.compaction) return this.compactionDelta(delta);
    let out = '';
    if (delta.reasoning || delta.reasoningSignature || delta.reasoningEncrypted) out += this.reasoning(delta);
    if (delta.logprobs) {
      // Logprobs ride on the text they score; a chunk with only logprobs waits for the next text.
      const logprobs = outputTextLogprobs(delta.logprobs);
      if (this.pendingLogprobs) this.pendingLogprobs.push(...logprobs);
      else this.pendingLogprobs = logprobs;
    }
    if (delta.content) out += this.text(delta.content);
    for (const call of delta.toolCalls) out += this.toolCall(call);
    if (delta.finishReason) this.finishReason = delta.finishReason;
    return out;
  }

  /** `endedAt`: when the answer ended (seconds; a background run's, so that a replay renders it the same); default now. */
  end(usage: Usage | undefined, endedAt?: number): string {
    const { status, incompleteDetails } = statusOf(this.finishReason);
    const closing = this.compaction ? this.compactionItem() : this.close(status);
    const completedAt = status === 'completed' ? (endedAt ?? Math.floor(Date.now() / 1000)) : null;
    const response = this.response(status, completedAt, 'null', json(incompleteDetails), this.outputJson.join(','), json(renderUsage(usage, chatAnswerCost(usage, this.prices, this.pricing, this.finishReason))));
    this.terminalResponse = response;
    this.onTerminal?.(response);
    return closing + this.event(status === 'completed' ? 'response.completed' : 'response.incomplete', `"response":${response}`);
  }

  /**
   * After the commit point: `response.failed` (the partial output, the open item marked incomplete),
   * then an `error` event. Its code, message and param are where the SDK's type declares them, and
   * again nested under `error` as the API's own error frames carry them: a payload with a top-level
   * `error` object is what makes the `openai` SDK throw (an APIError, from both `create({stream:true})`
   * iteration and `.stream()`) rather than hand the client an ordinary event after a clean-looking end.
   */
  fail(apiError: ApiError, usage: Usage | undefined): string {
    const output = [...this.outputJson];
    if (this.current) output[this.current.outputIndex] = this.itemJson(this.current, 'incomplete');
    this.current = undefined;
    const message = boundedMessage(apiError);
    const param = boundedParam(apiError) ?? null;
    const code = apiError.code ?? null;
    const error = json({ code: responseErrorCode(apiError.status), message });
    const response = this.response('failed', null, error, 'null', output.join(','), json(renderUsage(usage)));
    const nested = json({ type: apiError.type, code, message, param });
    return (
      this.event('response.failed', `"response":${response}`) +
      this.event('error', `"code":${json(code)},"message":${json(message)},"param":${json(param)},"error":${nested}`)
    );
  }

  /** A compaction's summary is gathered, never shown: the reasoning and calls of the summary request are not the client's. */
  private compactionDelta(delta: ChatStreamDelta): string {
    if (delta.content) this.summary += delta.content;
    if (delta.finishReason) this.finishReason = delta.finishReason;
    return '';
  }

  /** The sealed compaction item, added and done at once (it exists only once the summary is whole). */
  private compactionItem(): string {
    const outputIndex = this.outputJson.length;
    const item = json(compactionItem(compactionItemId(this.base, outputIndex), this.summary, this.providerId, this.tags));
    this.outputJson.push(item);
    const fields = `"output_index":${outputIndex},"item":${item}`;
    return this.event('response.output_item.added', fields) + this.event('response.output_item.done', fields);
  }

  private event(type: string, fields: string): string {
    const sequence = this.sequence++;
    if (sequence <= this.after) return '';
    return `event: ${type}\ndata: {"type":"${type}","sequence_number":${sequence},${fields}}\n\n`;
  }

  /** The response object as JSON text; `usage` is `null` while the response is in progress (present, as the schema wants). */
  private response(status: ResponseStatus | 'queued', completedAt: number | null, error: string, incompleteDetails: string, output: string, usage: string): string {
    return (
      `{"id":${this.idJson},"object":"response","created_at":${this.createdAt},"status":"${status}","background":${this.background},` +
      `"completed_at":${completedAt ?? 'null'},"error":${error},"incomplete_details":${incompleteDetails},"model":${this.modelJson},` +
      `"output":[${output}],${this.settingsJson},"usage":${usage}}`
    );
  }

  private reasoning(delta: ChatStreamDelta): string {
    let out = '';
    if (delta.reasoning) {
      const item = this.openReasoning();
      out += item.out;
      if (!item.state.partOpen) {
        item.state.partOpen = true;
        out += this.event('response.reasoning_summary_part.added', `${this.itemFields(item.state)},"summary_index":0,"part":{"type":"summary_text","text":""}`);
      }
      item.state.text += delta.reasoning;
      out += this.event('response.reasoning_summary_text.delta', `${this.itemFields(item.state)},"summary_index":0,"delta":${json(delta.reasoning)}`);
    }
    // A signature ends the thinking it signs; encrypted reasoning is whole in one delta. Either seals its item.
    if (delta.reasoningSignature) {
      const item = this.openReasoning();
      out += item.out;
      item.state.signature = delta.reasoningSignature;
    }
    if (delta.reasoningEncrypted) {
      const item = this.openReasoning();
      out += item.out;
      item.state.encrypted = delta.reasoningEncrypted;
    }
    return out;
  }

  /** The reasoning item still open to more reasoning (no signature or encrypted data yet), or a new one. */
  private openReasoning(): { state: ReasoningState; out: string } {
    const current = this.current;
    if (current?.kind === 'reasoning' && !current.signature && !current.encrypted) return { state: current, out: '' };
    let out = this.close('completed');
    const outputIndex = this.outputJson.length;
    const state: ReasoningState = { kind: 'reasoning', outputIndex, id: itemId('rs', this.base, outputIndex), text: '', signature: '', encrypted: '', partOpen: false };
    this.begin(state);
    out += this.event('response.output_item.added', `"output_index":${outputIndex},"item":{"id":${json(state.id)},"type":"reasoning","summary":[]}`);
    return { state, out };
  }

  private text(content: string): string {
    let out = '';
    let state = this.current;
    if (state?.kind !== 'message') {
      out += this.close('completed');
      const outputIndex = this.outputJson.length;
      state = { kind: 'message', outputIndex, id: itemId('msg', this.base, outputIndex), text: '' };
      this.begin(state);
      out +=
        this.event('response.output_item.added', `"output_index":${outputIndex},"item":{"id":${json(state.id)},"type":"message","status":"in_progress","role":"assistant","content":[]}`) +
        this.event('response.content_part.added', `${this.itemFields(state)},"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`);
    }
    state.text += content;
    const logprobs = this.pendingLogprobs;
    if (logprobs === undefined) return out + this.event('response.output_text.delta', `${this.itemFields(state)},"content_index":0,"delta":${json(content)},"logprobs":[]`);
    this.pendingLogprobs = undefined;
    if (state.logprobs) state.logprobs.push(...logprobs);
    else state.logprobs = logprobs.slice();
    return out + this.event('response.output_text.delta', `${this.itemFields(state)},"content_index":0,"delta":${json(content)},"logprobs":${json(deltaLogprobs(logprobs))}`);
  }

  private toolCall(call: ToolCallDelta): string {
    let out = '';
    let state = this.calls.get(call.index);
    if (state === undefined) {
      out += this.close('completed');
      const outputIndex = this.outputJson.length;
      state = {
        kind: 'function_call',
        outputIndex,
        id: itemId(toolCallPrefix(this.toolSet, call.name), this.base, outputIndex),
        callId: call.id || `call_${this.base}_${outputIndex}`,
        name: call.name,
        arguments: '',
        custom: dialectToolOf(this.toolSet, call.name).kind === 'custom',
      };
      this.begin(state);
      this.calls.set(call.index, state);
      out += this.event(
        'response.output_item.added',
        `"output_index":${outputIndex},"item":${this.itemJson(state, 'in_progress')}`,
      );
    } else if (!state.name && call.name) {
      state.name = call.name;
    }
    if (call.arguments) {
      state.arguments += call.arguments;
      if (!state.custom) out += this.event('response.function_call_arguments.delta', `${this.itemFields(state)},"delta":${json(call.arguments)}`);
      // A delta for a call already closed (a provider interleaving calls): its item is rewritten, so the
      // final response carries the whole arguments even though its .done events went out earlier.
      if (state !== this.current) this.outputJson[state.outputIndex] = this.itemJson(state, 'completed');
    }
    return out;
  }

  private begin(state: ItemState): void {
    this.current = state;
    this.outputJson.push('');
  }

  /** The closing events of the open item (none open: ''), with its final JSON kept for the response. */
  private close(status: 'completed' | 'incomplete'): string {
    const state = this.current;
    if (state === undefined) return '';
    this.current = undefined;
    let out = '';
    const fields = this.itemFields(state);
    if (state.kind === 'reasoning' && state.partOpen) {
      const text = json(state.text);
      out +=
        this.event('response.reasoning_summary_text.done', `${fields},"summary_index":0,"text":${text}`) +
        this.event('response.reasoning_summary_part.done', `${fields},"summary_index":0,"part":{"type":"summary_text","text":${text}}`);
    } else if (state.kind === 'message') {
      const text = json(state.text);
      out +=
        this.event('response.output_text.done', `${fields},"content_index":0,"text":${text},"logprobs":${state.logprobs ? json(deltaLogprobs(state.logprobs)) : '[]'}`) +
        this.event('response.content_part.done', `${fields},"content_index":0,"part":${outputTextPart(state)}`);
    } else if (state.kind === 'function_call' && state.custom) {
      const input = json(customInputOf(state.arguments));
      out +=
        this.event('response.custom_tool_call_input.delta', `${fields},"delta":${input}`) +
        this.event('response.custom_tool_call_input.done', `${fields},"input":${input}`);
    } else if (state.kind === 'function_call') {
      const name = dialectToolOf(this.toolSet, state.name).name;
      out += this.event('response.function_call_arguments.done', `${fields},"name":${json(name)},"arguments":${json(state.arguments)}`);
    }
    const item = this.itemJson(state, status);
    this.outputJson[state.outputIndex] = item;
    return out + this.event('response.output_item.done', `"output_index":${state.outputIndex},"item":${item}`);
  }

  private itemFields(state: ItemState): string {
    return `"item_id":${json(state.id)},"output_index":${state.outputIndex}`;
  }

  private itemJson(state: ItemState, status: 'completed' | 'incomplete' | 'in_progress'): string {
    switch (state.kind) {
      case 'reasoning':
        return json(reasoningItem(state.id, state.text, state.signature, state.encrypted, this.providerId, this.tags));
      case 'message':
        return `{"id":${json(state.id)},"type":"message","status":"${status}","role":"assistant","content":[${outputTextPart(state)}]}`;
      case 'function_call':
        return json(toolCallItem(state.id, status, state.callId, state.name, state.arguments, this.toolSet));
    }
  }
}
