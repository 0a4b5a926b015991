import type { Dispatcher, Pool } from 'undici';
import { toProviderError, type AttemptSignal, type ProviderError } from '../provider-adapter.js';
import { MAX_ERROR_BODY_BYTES, readBounded } from './buffered-request.js';

/**
 * A request whose answer body is read as it arrives (SSE). An error status is read (bounded) and turned
 * into the ProviderError `httpError` makes of it; transport failures and aborts become ProviderErrors too.
 */
export async function streamingRequest(
  pool: Pool,
  options: Omit<Dispatcher.RequestOptions, 'signal'>,
  signal: AttemptSignal,
  httpError: (status: number, bodyText: string) => ProviderError,
): Promise<Dispatcher.ResponseData> {
  try {
    // undici only calls add/removeEventListener and reads `reason`, which every AttemptSignal has.
    const response = await pool.request({ ...options, signal: signal as AbortSignal });
    if (response.statusCode >= 300) {
      const text = await readBounded(response.body, MAX_ERROR_BODY_BYTES);
      throw httpError(response.statusCode, text);
    }
    return response;
  } catch (error) {
    throw toProviderError(error, signal);
  }
}
