import type { Dispatcher, Pool } from 'undici';
import { endUpstreamSpan, startUpstreamSpan } from '@gateway/platform';
import { toProviderError, type AttemptSignal, type ProviderError } from '../provider-adapter.js';
import { MAX_ERROR_BODY_BYTES, readBounded } from './buffered-request.js';
import { requestNotingSent } from './sent-notice.js';

/**
 * A request whose answer body is read as it arrives (SSE, eventstream, audio). An error status is read
 * (bounded) and turned into the ProviderError `httpError` makes of it (with the answer's headers, for a
 * provider that names the error there); transport failures and aborts become ProviderErrors too.
 */
export async function streamingRequest(
  pool: Pool,
  options: Omit<Dispatcher.RequestOptions, 'signal'>,
  signal: AttemptSignal,
  httpError: (status: number, bodyText: string, headers: Dispatcher.ResponseData['headers']) => ProviderError,
): Promise<Dispatcher.ResponseData> {
  // The span covers the request up to the answer's headers (the body is the stream the caller reads).
  const traced = startUpstreamSpan(options.method, options.path, (options.headers ?? {}) as Record<string, string>);
  try {
    // undici only calls add/removeEventListener and reads `reason`, which every AttemptSignal has; the
    // signal also learns when the whole request was written (sent-notice.ts).
    const response = await requestNotingSent(pool, { ...options, ...(traced ? { headers: traced.headers } : {}), signal: signal as AbortSignal });
    if (traced) endUpstreamSpan(traced.span, response.statusCode);
    if (response.statusCode >= 300) {
      const text = await readBounded(response.body, MAX_ERROR_BODY_BYTES);
      throw httpError(response.statusCode, text, response.headers);
    }
    return response;
  } catch (error) {
    if (traced && traced.span.isRecording()) endUpstreamSpan(traced.span, undefined, error);
    throw toProviderError(error, signal);
  }
}
