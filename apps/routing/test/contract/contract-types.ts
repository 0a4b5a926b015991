import type { ProviderAdapter } from '../../src/providers/provider-adapter.js';
import type { ConnectionWatch } from './connection-watch.js';

/*
 * The shapes the contract table is written in. A setup module per kind (setups/<kind>.ts) turns a
 * ScriptedAnswer into its fake's own script and reads what its fake received through a WireReader, so
 * the scenarios in adapter-contract.test.ts never touch a wire format.
 */

/** Every scenario of the contract, by the name the table declares support against. */
export const SCENARIOS = [
  'text',
  'static headers',
  'system prompt',
  'conversation history',
  'generation parameters',
  'logprobs carried or named',
  'tool definitions and choice',
  'tool call answer',
  'parallel tool calls',
  'tool round trip',
  'tool error result',
  'image input',
  'image url input',
  'pdf input',
  'json schema output',
  'reasoning provenance',
  'reasoning with tool calls',
  'redacted reasoning',
  'finish reasons',
  'stop sequence reported',
  'safety block',
  'usage',
  'usage of reasoning only',
  'error 400',
  'bad credentials',
  'error 429',
  'error 5xx',
  'connection reset',
  'timeout',
  'stream cut',
  'stream error event',
  'cancellation',
  'prompt cache marks',
  'embeddings',
] as const;

export type Scenario = (typeof SCENARIOS)[number];

/** Canonical token counts a scenario scripts; the setup writes them in its provider's terms. */
export interface ScriptedUsage {
  /** Every prompt token, cache reads and writes included (canonical inputTokens). */
  input: number;
  cacheRead: number;
  cacheWrite: number;
  /** Every generated token, reasoning included. */
  output: number;
  reasoning: number;
  /**
   * The output count the provider puts on the wire in ITS terms, when a scenario scripts a provider that
   * reports less than it did (an OpenAI-compatible server's `completion_tokens: 0` beside its reasoning
   * tokens); absent: the count the API documents for `output` (Gemini's candidates leave reasoning out).
   */
  wireOutput?: number;
}

export interface ScriptedToolCall {
  id: string;
  name: string;
  /** JSON object text. */
  arguments: string;
}

/** What the fake answers the next request with, in canonical terms. */
export type ScriptedAnswer =
  | {
      type: 'answer';
      text?: string;
      toolCalls?: ScriptedToolCall[];
      /** Reasoning text the provider returns first, signed as the provider signs it. */
      reasoning?: string;
      /** Redacted (encrypted) reasoning the provider returns, opaque bytes only it can read back. */
      redactedReasoning?: boolean;
      /** Default: tool_calls with tool calls, else stop. */
      finish?: 'stop' | 'length' | 'tool_calls';
      /** The answer ended on this stop sequence (finish stop), reported as the provider reports it. */
      stopSequence?: string;
      usage?: ScriptedUsage;
    }
  /** An error answer with this status whose body carries `message` in the provider's envelope. */
  | { type: 'error'; status: number; message: string }
  /** The provider's safety block (how the API says it: error status, blocked prompt, refusal). */
  | { type: 'safety' }
  /** The connection is destroyed before any answer byte. */
  | { type: 'reset' }
  /** A long answer streamed slowly (many chunks, a pause between them), for cancellation. */
  | { type: 'slow stream'; text: string }
  /** Never answers (headers included): the attempt's deadline must end it. */
  | { type: 'stall' }
  /** A stream whose connection drops after its first content chunks, before it finished. */
  | { type: 'cut stream'; text: string }
  /** A stream that, after its first content chunk, carries the provider's in-band "overloaded" error. */
  | { type: 'stream error'; text: string };

/** One tool a request offered, as the provider received it. */
export interface WireTool {
  name: string;
  /** The JSON Schema of its arguments. */
  parameters: unknown;
}

/** How the provider received the tool choice, in canonical terms. */
export type WireToolChoice = 'auto' | 'none' | 'required' | { name: string } | undefined;

/** A tool call sent back in the history: `ref` is what links results to it (its id, or its name where the API has no ids). */
export interface WireToolCall {
  ref: string;
  name: string;
  arguments: unknown;
}

export interface WireToolResult {
  ref: string;
  /** The result is flagged as the tool's failure (undefined where the wire has no such flag). */
  isError?: boolean;
  /** The result text as sent. */
  content: string;
}

export interface WireMedia {
  mediaType: string;
  /** Inline bytes, base64. */
  base64: string;
}

export interface WireReasoning {
  text: string;
  signature: string;
}

export interface WireGeneration {
  temperature: number | undefined;
  maxTokens: number | undefined;
  stop: string[] | undefined;
}

/** Reads what a fake received, in the scenario's terms. Each function gets one recorded request. */
export interface WireReader {
  /** The upstream model the request named (body or path). */
  model(request: ReceivedRequest): string;
  streamed(request: ReceivedRequest): boolean;
  systemText(request: ReceivedRequest): string;
  /** The conversation's turns after the system prompt, in order: role (user | assistant) and text. */
  turns(request: ReceivedRequest): { role: string; text: string }[];
  /** Every text the request carried (system, messages, instructions). */
  allText(request: ReceivedRequest): string;
  tools(request: ReceivedRequest): WireTool[];
  toolChoice(request: ReceivedRequest): WireToolChoice;
  toolCallsSentBack(request: ReceivedRequest): WireToolCall[];
  toolResults(request: ReceivedRequest): WireToolResult[];
  inlineMedia(request: ReceivedRequest): WireMedia[];
  /** Images sent by link (http/https URL), as the provider received them. */
  imageUrls(request: ReceivedRequest): string[];
  /** The schema sent for native structured output, undefined when none was. */
  nativeSchema(request: ReceivedRequest): unknown;
  reasoningSent(request: ReceivedRequest): WireReasoning[];
  /** Redacted / encrypted reasoning sent back, as the opaque values the provider gave. */
  redactedReasoningSent(request: ReceivedRequest): string[];
  /** Sampling and length settings as the provider received them (absent ones undefined). */
  generation(request: ReceivedRequest): WireGeneration;
  /** The prompt-cache marks the request carried, in order, each as its ttl ('' for the provider's default). */
  cacheMarks(request: ReceivedRequest): string[];
}

/** A request as the fake recorded it (the fakes' own RecordedRequest has these fields). */
export interface ReceivedRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}

/** One adapter built through createAdapter from its catalog config, wired to its fake. */
export interface ContractRig {
  readonly adapter: ProviderAdapter;
  /** False for a provider without an upstream (simulated): its answers follow from the request, not a script. */
  readonly scripted: boolean;
  readonly providerId: string;
  readonly upstreamModel: string;
  /** The upstream model the embeddings scenario asks (an embedding model or deployment). */
  readonly embeddingModel?: string;
  /** The catalog's max_output_tokens for the model (providers that need an output bound use it). */
  readonly modelMaxOutputTokens: number;
  /** Queues the answer to the next request. */
  script(answer: ScriptedAnswer): void;
  /** The requests the fake received since the last reset, oldest first (token grants and the like excluded). */
  received(): ReceivedRequest[];
  readonly reader: WireReader;
  /**
   * The same provider built through createAdapter with a wrong secret, when the fake checks credentials;
   * undefined when it does not (the scenario then scripts the provider's own 401 answer).
   */
  adapterWithWrongCredentials(): ProviderAdapter | undefined;
  /**
   * Requests the fake itself still holds open, where it counts them: cancellation and timeout then also
   * wait for the fake to see the close (the relay sees it for every row).
   */
  upstreamOpenRequests?: () => number;
  /** The relay the adapter reaches its fake through (cancellation watches it); undefined without an upstream. */
  readonly watch: ConnectionWatch | undefined;
  reset(): void;
  close(): Promise<void>;
}

/** How a kind says a safety block: a ProviderError of kind content_filter, or a content_filter finish. */
export type SafetyMode = 'error' | 'finish';

/** One row of the contract table. */
export interface ContractSetup {
  kind: string;
  /** The row's name when one kind has several configurations (default: the kind). */
  label?: string;
  /** Scenarios this kind's API cannot express, each with the reason (they are skipped by this declaration). */
  unsupported: Partial<Record<Scenario, string>>;
  /** How JSON schema output is done: natively, or by the instructed-and-checked fallback. */
  jsonSchema: 'native' | 'instructed';
  /** One mode for both, or one per mode where a stream has already relayed text before the block is known. */
  safety: SafetyMode | { chat: SafetyMode; stream: SafetyMode };
  /** Usage counters this provider reports beside input and output. */
  usage: { cacheRead: boolean; cacheWrite: boolean; reasoning: boolean };
  start(): Promise<ContractRig>;
}
