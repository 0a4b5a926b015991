import type { Request, Response } from 'express';
import type { EdgeContext } from '../../context.js';
import { requestIdOf } from '../../request-id.js';
import { edgeErrors } from '../../errors.js';
import { mediaOf } from '../shared.js';

const IMAGE_ID = /^[A-Za-z0-9_-]{16,64}$/;

/**
 * GET /v1/images/files/{id}: an image the gateway generated and hosts (answers with `response_format:
 * url`). No API key: the id is 128 random bits, so the URL itself is the capability, as a provider's
 * signed image URL is. Unknown or expired: 404.
 */
export function hostedImageHandler(context: EdgeContext) {
  return async (request: Request, response: Response): Promise<void> => {
    const id = String((request.params as Record<string, string>).imageId ?? '');
    if (!IMAGE_ID.test(id)) throw edgeErrors.notFound('No such image, or it has expired.');
    const image = await mediaOf(context).getImage({ imageId: id }, { requestId: requestIdOf(response), deadlineMs: 15_000 });
    response.status(200);
    response.setHeader('content-type', image.contentType);
    response.setHeader('content-length', image.data.length);
    response.setHeader('cache-control', 'private, max-age=3600');
    response.setHeader('x-content-type-options', 'nosniff');
    response.end(image.data);
  };
}
