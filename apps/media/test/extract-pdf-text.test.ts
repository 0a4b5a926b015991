import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';
import { MediaServiceClient, MediaServiceService } from '@gateway/proto';
import { testLogger } from '@gateway/testing';
import { startMediaService } from '../src/index.js';
import { minimalPdf } from '@gateway/testing';

async function rejection(promise: Promise<unknown>): Promise<GatewayError> {
  const error = await promise.then(() => undefined, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(GatewayError);
  return error as GatewayError;
}

describe('media service: ExtractPdfText', () => {
  let service: Awaited<ReturnType<typeof startMediaService>>;
  let client: ReturnType<typeof createClient<MediaServiceClient>>;

  beforeAll(async () => {
    service = await startMediaService({
      listenAddress: '127.0.0.1:0', logger: testLogger('media'),
      pdfLimits: { maxBytes: 64 * 1024, maxPages: 3, maxTextCharacters: 10_000 },
    });
    client = createClient(MediaServiceClient, MediaServiceService, service.address, { maxAttempts: 1 });
  });
  afterAll(async () => {
    client.close();
    await service.stop();
  });

  it('extracts the text of every page in order', async () => {
    const response = await client.extractPdfText({ pdf: minimalPdf(['Hello PDF world', 'Second (page) here']), maxPages: 0 });
    expect(response.pages).toBe(2);
    expect(response.text).toBe('Hello PDF world\n\nSecond (page) here');
  });

  it('refuses bytes that are not a PDF', async () => {
    const error = await rejection(client.extractPdfText({ pdf: Buffer.from('just some text'), maxPages: 0 }));
    expect([error.status, error.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST]);
  });

  it('refuses a broken PDF as unreadable', async () => {
    const error = await rejection(client.extractPdfText({ pdf: Buffer.from('%PDF-1.4\n garbage without objects'), maxPages: 0 }));
    expect(error.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
  });

  it('enforces the page bound (service bound and the caller\'s own)', async () => {
    const fourPages = await rejection(client.extractPdfText({ pdf: minimalPdf(['a', 'b', 'c', 'd']), maxPages: 0 }));
    expect([fourPages.status, fourPages.reason]).toEqual([GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE]);
    const callerBound = await rejection(client.extractPdfText({ pdf: minimalPdf(['a', 'b']), maxPages: 1 }));
    expect(callerBound.reason).toBe(ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE);
  });

  it('enforces the byte bound', async () => {
    const padded = Buffer.concat([minimalPdf(['x']), Buffer.alloc(70 * 1024, 0x20)]);
    const error = await rejection(client.extractPdfText({ pdf: padded, maxPages: 0 }));
    expect(error.reason).toBe(ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE);
  });
});
