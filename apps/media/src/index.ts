import { ErrorReason, GatewayError, GrpcStatus, startGrpcServer, unary, type Logger, type Registry } from '@gateway/platform';
import { MediaServiceService, type MediaServiceServer } from '@gateway/proto';
import { DEFAULT_PDF_LIMITS, extractPdfText, type PdfTextLimits } from './pdf-text.js';
import { fetchUrl, type UrlFetchLimits } from './url-fetch/fetch-url.js';

export { checkAddress, type AddressVerdict, type RefusalReason } from './url-fetch/address-policy.js';
export { DEFAULT_URL_FETCH_LIMITS, type UrlFetchLimits } from './url-fetch/fetch-url.js';

export interface MediaServiceOptions {
  listenAddress: string;
  logger: Logger;
  /** Bounds of ExtractPdfText (default: 20 MiB, 500 pages, 4M characters). */
  pdfLimits?: PdfTextLimits;
  /** FetchUrl bounds (default: 20 MiB, 15 s, at most 60 s, 3 redirects). */
  urlFetchLimits?: Partial<UrlFetchLimits>;
  /**
   * FOR TESTS ONLY: lets FetchUrl reach loopback (127.0.0.0/8, ::1) so a test can serve files and
   * redirect chains from a local server. Every other internal range stays refused. Deliberately not
   * read from the environment by main.ts: no deployment can turn it on.
   */
  allowLoopbackUrlsForTests?: boolean;
  /** The process's metrics registry (the media service has no dependency to report; Node's own metrics). */
  metrics?: Registry;
}

export interface RunningMediaService {
  address: string;
  stop(): Promise<void>;
}

function notYet(method: string) {
  return async (): Promise<never> => {
    throw new GatewayError(GrpcStatus.UNIMPLEMENTED, ErrorReason.ERROR_REASON_UNSPECIFIED, `${method} is not implemented by the media service yet.`);
  };
}

export async function startMediaService(options: MediaServiceOptions): Promise<RunningMediaService> {
  const { logger } = options;
  const limits = options.pdfLimits ?? DEFAULT_PDF_LIMITS;
  const implementation: MediaServiceServer = {
    extractPdfText: unary(logger, 'ExtractPdfText', (request) => extractPdfText(request.pdf, request.maxPages, limits)),
    fetchUrl: unary(logger, 'FetchUrl', async (request, call) => {
      // A caller that gives up (deadline, cancellation) stops the download too.
      const cancelled = new AbortController();
      const onCancelled = () => cancelled.abort();
      call.once('cancelled', onCancelled);
      try {
        const fetched = await fetchUrl(
          request.url,
          { maxBytes: request.maxBytes, timeoutMs: request.timeoutMs },
          { allowLoopback: options.allowLoopbackUrlsForTests === true, limits: options.urlFetchLimits },
          cancelled.signal,
        );
        return { data: fetched.data, contentType: fetched.contentType, finalUrl: fetched.finalUrl };
      } finally {
        call.off('cancelled', onCancelled);
      }
    }),
    convertAudio: unary(logger, 'ConvertAudio', notYet('ConvertAudio')),
    storeImage: unary(logger, 'StoreImage', notYet('StoreImage')),
    getImage: unary(logger, 'GetImage', notYet('GetImage')),
  };
  const server = await startGrpcServer({
    address: options.listenAddress,
    services: [{ definition: MediaServiceService, implementation, name: 'gateway.v1.MediaService' }],
    logger,
  });
  return { address: server.address, stop: () => server.stop() };
}
