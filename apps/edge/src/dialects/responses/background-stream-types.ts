import type { Cancellation } from '@gateway/platform';
import type { StreamResponseEventsResponse } from '@gateway/proto';
import type { AnswerSink } from '../../inference/answer-sink.js';

// The two seams between the stored-responses client and the background stream renderer, in a file of
// their own so that stored-responses.ts (which context.ts names) does not reach the dialect's modules.

/** The jobs service's StreamResponseEvents, as the renderer reads it. */
export type EventSource = (accountId: string, responseId: string, fromSeq: number, requestId: string, signal: Cancellation, deadlineMs: number) => AsyncIterable<StreamResponseEventsResponse>;

/** Streams a background response into `sink` from after `startingAfter` (-1: from the start). */
export type StreamRun = (sink: AnswerSink, request: { accountId: string; responseId: string; startingAfter: number; requestId: string; headers: Record<string, string> }) => Promise<void>;
