import { ErrorReason, GatewayError, GrpcStatus, startGrpcServer, unary, type Logger } from '@gateway/platform';
import { MediaServiceService, type MediaServiceServer } from '@gateway/proto';
import { DEFAULT_PDF_LIMITS, extractPdfText, type PdfTextLimits } from './pdf-text.js';

export interface MediaServiceOptions {
  listenAddress: string;
  logger: Logger;
  /** Bounds of ExtractPdfText (default: 20 MiB, 500 pages, 4M characters). */
  pdfLimits?: PdfTextLimits;
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
    fetchUrl: unary(logger, 'FetchUrl', notYet('FetchUrl')),
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
