import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher, Pool } from 'undici';
import { endUpstreamSpan, startUpstreamSpan } from '@gateway/platform';
import { toProviderError, type AttemptSignal } from '../provider-adapter.js';
import { BufferingHandler, MAX_RESPONSE_BYTES, type BufferedAnswer } from '../http/buffered-request.js';
import { bedrockHttpError } from './bedrock-error.js';
import { streamingRequest, type StreamingResponse } from '../http/streaming-request.js';

/** Bedrock names an error's type in this header (the body has only the message). */
const ERROR_TYPE_HEADER = 'x-amzn-errortype';

/** The buffering handler of providers/http, also keeping the error type header of an error answer. */
class ErrorTypeHandler extends BufferingHandler {
  errorType = '';

  override onHeaders(statusCode: number, headers?: Buffer[]) {
    if (statusCode >= 300 && headers) {
      for (let index = 0; index + 1 < headers.length; index += 2) {
        if (headers[index]!.toString('latin1').toLowerCase() === ERROR_TYPE_HEADER) this.errorType = headers[index + 1]!.toString('latin1');
      }
    }
    return super.onHeaders(statusCode);
  }
}

/**
 * A Converse call read whole: the answer text, or a ProviderError (HTTP error mapped with its
 * x-amzn-errortype, transport failure, abort). Same undici handler path as `bufferedRequest`.
 */
export async function bedrockBufferedRequest(pool: Pool, options: Dispatcher.DispatchOptions, signal: AttemptSignal): Promise<string> {
  if (signal.aborted) throw toProviderError(signal.reason, signal);
  const traced = startUpstreamSpan(options.method, options.path, (options.headers ?? {}) as Record<string, string>);
  let handler: ErrorTypeHandler | undefined;
  let answer: BufferedAnswer;
  try {
    answer = await new Promise<BufferedAnswer>((resolve, reject) => {
      handler = new ErrorTypeHandler(signal, MAX_RESPONSE_BYTES, resolve, reject);
      pool.dispatch(traced ? { ...options, headers: traced.headers } : options, handler);
    });
    if (traced) endUpstreamSpan(traced.span, answer.statusCode);
  } catch (error) {
    if (traced) endUpstreamSpan(traced.span, undefined, error);
    throw toProviderError(error, signal);
  }
  if (answer.statusCode >= 300) throw bedrockHttpError(answer.statusCode, answer.text, handler?.errorType);
  return answer.text;
}

/** A ConverseStream call: the response once its status is 200 (its body is the eventstream), else a ProviderError. */
export function bedrockStreamingRequest(
  pool: Pool,
  options: Omit<Dispatcher.DispatchOptions, 'signal'>,
  signal: AttemptSignal,
): Promise<StreamingResponse> {
  return streamingRequest(pool, options, signal, streamHttpError);
}

function streamHttpError(status: number, bodyText: string, headers: IncomingHttpHeaders) {
  const type = headers[ERROR_TYPE_HEADER];
  return bedrockHttpError(status, bodyText, Array.isArray(type) ? type[0] : type);
}
