import { ErrorReason, GatewayError, GrpcStatus, startGrpcServer, unary, type Logger, type Registry, type InternalAuth } from '@gateway/platform';
import { postgresCheck } from '@gateway/platform/db';
import { MediaServiceService, type MediaServiceServer } from '@gateway/proto';
import { DEFAULT_PDF_LIMITS, extractPdfText, type PdfTextLimits } from './pdf-text.js';
import { fetchUrl, type UrlFetchLimits } from './url-fetch/fetch-url.js';
import { AudioConverter, DEFAULT_AUDIO_LIMITS, type AudioLimits } from './audio-convert.js';
import { DEFAULT_IMAGE_HOSTING, ImageHosting, PostgresImageStore, type ImageHostingOptions } from './image-store.js';

export { checkAddress, type AddressVerdict, type RefusalReason } from './url-fetch/address-policy.js';
export { DEFAULT_URL_FETCH_LIMITS, type UrlFetchLimits } from './url-fetch/fetch-url.js';
export { sniffContainer, wavDurationMs, DEFAULT_AUDIO_LIMITS, TRANSCRIPTION_TARGET, type AudioLimits } from './audio-convert.js';
export { DEFAULT_IMAGE_HOSTING, MEDIA_SCHEMA, type ImageHostingOptions } from './image-store.js';

/** Largest request message the media service reads: a 20 MiB file plus its other fields. */
export const MEDIA_MAX_RECEIVE_BYTES = 21 * 1024 * 1024;

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
  /** Postgres of the hosted image store; absent: StoreImage/GetImage answer UNAVAILABLE. */
  databaseUrl?: string;
  /** Image hosting bounds (default: 1 h expiry, 20 MiB, swept every minute). */
  imageHosting?: Partial<ImageHostingOptions>;
  /** ConvertAudio bounds (default: 20 MiB in, 40 MiB out, 30 minutes of audio, 60 s of ffmpeg, 2 ffmpeg processes at once). */
  audioLimits?: Partial<AudioLimits>;
  /** The process's metrics registry (the media service has no dependency to report; Node's own metrics). */
  metrics?: Registry;
  /** Internal gRPC authentication: what its server accepts and its clients send. Unset: unchecked. */
  internalAuth?: InternalAuth;
}

export interface RunningMediaService {
  address: string;
  stop(): Promise<void>;
}

function noImageStore(): never {
  throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_UNSPECIFIED, 'This media service has no image store (it was started without DATABASE_URL).');
}

/** The call's cancellation as an AbortSignal, for the work behind it (downloads, ffmpeg). */
function cancellationOf(call: { cancelled?: boolean; once(event: 'cancelled', listener: () => void): unknown; off(event: 'cancelled', listener: () => void): unknown }) {
  const controller = new AbortController();
  const onCancelled = () => controller.abort();
  call.once('cancelled', onCancelled);
  // A call cancelled before its handler ran has fired its event already.
  if (call.cancelled) controller.abort();
  return { signal: controller.signal, done: () => call.off('cancelled', onCancelled) };
}

export async function startMediaService(options: MediaServiceOptions): Promise<RunningMediaService> {
  const { logger } = options;
  const limits = options.pdfLimits ?? DEFAULT_PDF_LIMITS;
  const audio = new AudioConverter({ ...DEFAULT_AUDIO_LIMITS, ...options.audioLimits });
  const images = options.databaseUrl
    ? new ImageHosting(
        await PostgresImageStore.open({ databaseUrl: options.databaseUrl, logger, ...(options.metrics ? { metrics: options.metrics } : {}) }),
        { ...DEFAULT_IMAGE_HOSTING, ...options.imageHosting },
        logger,
      )
    : undefined;
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
    convertAudio: unary(logger, 'ConvertAudio', async (request, call) => {
      const cancellation = cancellationOf(call);
      try {
        const converted = await audio.convert(request.data, request.targetFormat, request.filename, cancellation.signal);
        return { ...converted, data: Buffer.from(converted.data.buffer, converted.data.byteOffset, converted.data.byteLength) };
      } finally {
        cancellation.done();
      }
    }),
    storeImage: unary(logger, 'StoreImage', (request) => (images ? images.storeImage(request) : noImageStore())),
    getImage: unary(logger, 'GetImage', (request) => (images ? images.getImage(request.imageId) : noImageStore())),
  };
  const server = await startGrpcServer({
    credentials: options.internalAuth?.accepted,
    address: options.listenAddress,
    services: [{ definition: MediaServiceService, implementation, name: 'gateway.v1.MediaService' }],
    logger,
    // Its largest requests carry one file of at most 20 MiB (an upload, a PDF, an image to host).
    maxReceiveMessageBytes: MEDIA_MAX_RECEIVE_BYTES,
    // With an image store, health follows its Postgres (conversion alone needs nothing outside the process).
    ...(options.databaseUrl ? { dependencies: [postgresCheck(options.databaseUrl, 'media')] } : {}),
    ...(options.metrics ? { metrics: options.metrics } : {}),
  });
  return {
    address: server.address,
    stop: async () => {
      await server.stop();
      await images?.stop();
    },
  };
}
