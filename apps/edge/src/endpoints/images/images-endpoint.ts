import { modelTakesEndpointParameter } from '@gateway/platform';
import { z } from 'zod';
import type { GenerateImagesRequest, GenerateImagesResponse, InputImage } from '@gateway/proto';
import type { CatalogModel } from '../../catalog-cache.js';
import { edgeErrors } from '../../errors.js';
import { sendJson } from '../../http.js';
import { parseBody } from '../../canonical/validation.js';
import type { EdgeContext } from '../../context.js';
import type { HttpAnswer } from '../../inference/answer-sink.js';
import { answerCost } from '../../inference/answer-cost.js';
import { gatewayHeaders } from '../../inference/gateway-headers.js';
import type { InferenceJob } from '../../inference/pipeline-steps.js';
import { readMultipart, singleField, type MultipartFile } from '../multipart.js';
import { defaultUploadArea } from '../upload-spool.js';
import { countTokens, ENDPOINT_DEADLINE_MS, mediaOf, pricePico, jsonBody, type EndpointFamily, type PreparedCall } from '../shared.js';

/** Output tokens assumed per image for the hold, as the router meters when a provider counts none (spec §2.1). */
const IMAGE_TOKENS_HOLD = 2_048;
/** Input tokens assumed per uploaded image for the hold (a chat image is at most ~2,000 at any provider). */
const INPUT_IMAGE_TOKENS_HOLD = 2_000;
const SIZE = /^[1-9]\d{0,4}x[1-9]\d{0,4}$/;
const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);

const common = {
  // Optional, as in OpenAI's API: absent, the catalog's default for the endpoint (model-resolution.ts).
  model: z.string().min(1).nullish(),
  n: z.number().int().min(1, 'must be at least 1').max(4_294_967_295, 'must be at most 4294967295').nullish(),
  // `auto` (the SDKs' and gpt-image's default) lets the provider choose. The hold does not depend on the
  // size (IMAGE_TOKENS_HOLD per image, whatever size is asked), so it bounds an `auto` image as any other.
  size: z.union([z.literal('auto'), z.string().regex(SIZE, "must be written '{width}x{height}', e.g. '1024x1024', or be 'auto'")]).nullish(),
  quality: z.string().max(64).nullish(),
  background: z.string().max(64).nullish(),
  response_format: z.enum(['url', 'b64_json']).nullish(),
  user: z.string().nullish(),
};

export const generationsSchema = z.looseObject({ ...common, prompt: z.string().min(1, 'must not be empty').max(8_192, 'at most 8192 characters') });
export const editsSchema = z.looseObject({
  ...common,
  prompt: z.string().min(1, 'must not be empty').max(32_000, 'at most 32000 characters'),
  n: z.coerce.number().int().min(1, 'must be at least 1').max(4_294_967_295, 'must be at most 4294967295').nullish(),
});

type ImagesBody = z.infer<typeof generationsSchema>;
interface EditsBody extends ImagesBody {
  images: InputImage[];
  mask: InputImage | undefined;
}

interface PreparedImages {
  generation: GenerateImagesRequest;
  images: InputImage[];
  mask: InputImage | undefined;
  dropped: string[];
  responseFormat: 'url' | 'b64_json';
}

function checkCount(body: ImagesBody, model: CatalogModel): number {
  const n = body.n ?? 1;
  const max = model.model.maxImages ?? 1;
  if (n > max) throw edgeErrors.invalidRequest(`body.n: ${model.id} makes at most ${max} images per request.`, 'body.n');
  return n;
}

async function prepareImages(body: ImagesBody, model: CatalogModel, images: InputImage[], mask: InputImage | undefined) {
  const n = checkCount(body, model);
  const dropped: string[] = [];
  const knob = (name: 'quality' | 'background') => {
    const value = body[name] ?? undefined;
    if (value === undefined) return undefined;
    if (modelTakesEndpointParameter(model.supportedParameters, name)) return value;
    dropped.push(name);
    return undefined;
  };
  const generation: GenerateImagesRequest = {
    context: undefined,
    modelId: model.id,
    routingStrategy: '',
    prompt: body.prompt,
    n,
    size: body.size ?? undefined,
    quality: knob('quality'),
    background: knob('background'),
    responseFormat: body.response_format ?? 'url',
  };
  const [promptTokens] = await countTokens([body.prompt]);
  const holdPico =
    pricePico(model, 'perOutputImageToken', n * IMAGE_TOKENS_HOLD) +
    pricePico(model, 'perInputTextToken', promptTokens!) +
    pricePico(model, 'perInputImageToken', (images.length + (mask ? 1 : 0)) * INPUT_IMAGE_TOKENS_HOLD);
  return { prepared: { generation, images, mask, dropped, responseFormat: body.response_format ?? 'url' } as PreparedImages, holdPico };
}

/**
 * The origin of hosted image URLs: EDGE_PUBLIC_URL when set, else none — the URL is then the path alone
 * (`/v1/images/files/{id}`), relative to wherever the caller sent the request. Never the request's Host
 * header: a caller (or anything between) could name any origin there and have it served back as ours
 * (issue 29).
 */
function originOf(publicUrl: string | undefined): string {
  return publicUrl ? publicUrl.replace(/\/+$/, '') : '';
}

/** The answer: inline base64, or each image stored by the media service and answered as a URL the edge serves. */
async function renderImages(answer: GenerateImagesResponse, prepared: PreparedImages, job: InferenceJob, context: EdgeContext) {
  const origin = originOf(context.publicUrl);
  const data = await Promise.all(
    answer.data.map(async (image, index) => {
      const extra = image.revisedPrompt ? { revised_prompt: image.revisedPrompt } : {};
      if (prepared.responseFormat === 'b64_json') return { b64_json: image.b64Json ?? '', ...extra };
      const bytes = Buffer.from(image.b64Json ?? '', 'base64');
      const stored = await mediaOf(context).storeImage(
        { accountId: job.key.accountId, data: bytes, contentType: sniffImageType(bytes) ?? 'image/png', idempotencyKey: `${job.requestId}:${index}` },
        { requestId: job.requestId, deadlineMs: 30_000 },
      );
      return { url: `${origin}${stored.path}`, ...extra };
    }),
  );
  const usage = answer.usage;
  const input = (usage?.inputTextTokens ?? 0) + (usage?.inputImageTokens ?? 0);
  const output = usage?.outputImageTokens ?? 0;
  // The charge (usage.cost): an answer without an image is insured (no_images), as routing claims it.
  const cost = answerCost(usage, answer.prices, job.model.model.pricing, answer.data.length === 0 ? 'no_images' : '');
  return { created: Number(answer.created), data, usage: { input_tokens: input, output_tokens: output, total_tokens: input + output, ...cost } };
}

/** PNG, JPEG, WebP or GIF by their magic bytes. */
export function sniffImageType(bytes: Uint8Array): string | undefined {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length >= 8 && b.readUInt32BE(0) === 0x89504e47) return 'image/png';
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'image/jpeg';
  if (b.length >= 12 && b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP') return 'image/webp';
  if (b.length >= 6 && b.toString('latin1', 0, 4) === 'GIF8') return 'image/gif';
  return undefined;
}

function uploadedImage(file: MultipartFile, data: Buffer, path: string): InputImage {
  const type = sniffImageType(data);
  if (!type || !IMAGE_TYPES.has(type)) throw edgeErrors.invalidRequest(`${path}: not a PNG, JPEG, WebP or GIF image.`, path);
  return { data, filename: file.filename || 'image.png', mediaType: type };
}

async function exchangeImages({ prepared }: PreparedCall<PreparedImages>, job: InferenceJob, http: HttpAnswer, context: EdgeContext, edit: boolean): Promise<void> {
  const generation = { ...prepared.generation, context: job.routerContext, routingStrategy: job.strategy };
  const settings = { requestId: job.requestId, deadlineMs: ENDPOINT_DEADLINE_MS, signal: job.signal };
  const answer = edit
    ? (await context.router.editImages({ generation, images: prepared.images, mask: prepared.mask }, settings)).result!
    : await context.router.generateImages(generation, settings);
  // The Router answered (and published the usage): from here the reservation is settled, not released.
  job.commit(answer.usage);
  const body = await renderImages(answer, prepared, job, context);
  sendJson(http.response, 200, body, gatewayHeaders(answer.routingStrategy || job.strategy, prepared.dropped));
}

/** POST /v1/images/generations (spec §2.1, §4.2); the prompt is screened by the catalog's moderation model in the router. */
export const imageGenerationsFamily: EndpointFamily<ImagesBody, PreparedImages> = {
  endpoint: 'images.generations',
  parse: jsonBody(generationsSchema),
  modelName: (body) => body.model ?? '',
  prepare: (body, model) => prepareImages(body, model, [], undefined),
  exchange: (prepared, job, http, context) => exchangeImages(prepared, job, http, context, false),
};

/** POST /v1/images/edits (spec §4.1): multipart; `image` and `image[]` parts merge into one list. */
export const imageEditsFamily: EndpointFamily<EditsBody, PreparedImages> = {
  endpoint: 'images.edits',
  async read(request, context, response) {
    const upload = await readMultipart(request, context.bodyLimits, context.multipartBounds, { area: context.uploads ?? defaultUploadArea(), response });
    const fields: Record<string, string | undefined> = {};
    for (const name of ['model', 'prompt', 'n', 'size', 'quality', 'background', 'response_format', 'user']) fields[name] = singleField(upload, name);
    const parsed = parseBody(editsSchema, Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined && value !== '')));
    const imageFiles = upload.files.filter((file) => file.field === 'image' || file.field === 'image[]');
    if (imageFiles.length === 0) throw edgeErrors.invalidRequest('body.image: at least one image part (`image` or `image[]`) is required.', 'body.image');
    const masks = upload.files.filter((file) => file.field === 'mask');
    if (masks.length > 1) throw edgeErrors.invalidRequest('body.mask: at most one mask.', 'body.mask');
    const unknown = upload.files.find((file) => !['image', 'image[]', 'mask'].includes(file.field));
    if (unknown) throw edgeErrors.invalidRequest(`body.${unknown.field}: unexpected file part.`, `body.${unknown.field}`);
    // Into memory under the upload budget (upload-spool.ts), held until the answer is over.
    const loaded = await upload.load(masks[0] ? [...imageFiles, masks[0]] : imageFiles);
    return {
      ...parsed,
      images: imageFiles.map((file, index) => uploadedImage(file, loaded[index]!, `body.image.${index}`)),
      mask: masks[0] ? uploadedImage(masks[0], loaded[imageFiles.length]!, 'body.mask') : undefined,
    };
  },
  modelName: (body) => body.model ?? '',
  prepare: (body, model) => prepareImages(body, model, body.images, body.mask),
  exchange: (prepared, job, http, context) => exchangeImages(prepared, job, http, context, true),
};
