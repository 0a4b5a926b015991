import type { IncomingHttpHeaders } from 'node:http';

// The shapes the fake providers share (scripts, recorded requests); a leaf module, so the fakes and their helpers import it without a cycle.

/** One scripted answer of the fake provider. Every field is optional; an empty behaviour answers normally. */
export interface FakeBehaviour {
  /** Wait this long before sending headers (or before the reset / error). */
  latencyMs?: number;
  /** Answer with this status and `errorBody` (default body: an OpenAI error envelope). */
  status?: number;
  errorBody?: unknown;
  /** Destroy the socket instead of answering (connection reset before any response byte). */
  reset?: boolean;
  /** Never answer (the caller must time out); the socket is closed when the server closes. */
  stall?: boolean;
  /** Streams: headers sent, then the connection is cut after this many content chunks (0: before the first). */
  cutAfterChunks?: number;
  /** Streams: headers sent, this many content chunks sent, then silence (never ends). */
  stallAfterChunks?: number;
  /** Streams: delay between chunks. */
  chunkDelayMs?: number;
  /** Streams: how many chunks the text is split into (default 3). */
  chunkCount?: number;
  /** Generated text (default: `Hello from the fake upstream.`). */
  text?: string;
  toolCalls?: { id: string; name: string; arguments: string }[];
  /** Default: `tool_calls` when toolCalls are given, else `stop`. */
  finishReason?: string;
  /** `absent` leaves usage out (JSON and streams). Default: counts from text lengths. */
  usage?: 'absent' | { prompt_tokens: number; completion_tokens: number; cached_tokens?: number; reasoning_tokens?: number };
  /** Answer these exact bytes (a recorded fixture) with status 200 and this content type. */
  replay?: { contentType: string; body: string };
  /** Streams: an in-band error chunk `{error:{...}}` sent after `cutAfterChunks`-like count of chunks. */
  streamErrorAfterChunks?: number;
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** Parsed JSON body (undefined when it was not JSON). */
  body: any;
  receivedAt: number;
  /** The parts of a multipart/form-data upload (image edits, transcriptions), as received. */
  parts?: RecordedPart[];
}

export type FakeScript = FakeBehaviour | ((request: RecordedRequest) => FakeBehaviour);

export interface FakeUpstream {
  /** Base URL including `/v1`, as a provider's base_url. */
  url: string;
  /** Every request received, in order. */
  requests: RecordedRequest[];
  /** Queues behaviours for the next requests (one each, in order); when the queue is empty `fallback` answers. */
  script(...behaviours: FakeScript[]): void;
  /** Behaviour when the queue is empty (default: a normal answer). */
  setFallback(behaviour: FakeScript): void;
  /** Drops queued behaviours and recorded requests. */
  reset(): void;
  close(): Promise<void>;
}

/** One part of a multipart upload as the fake received it. */
export interface RecordedPart {
  name: string;
  /** Set for file parts. */
  filename?: string;
  contentType?: string;
  data: Buffer;
}
