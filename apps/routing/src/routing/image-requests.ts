import { ErrorReason, GatewayError, GrpcStatus, errors, type CallerSignal } from '@gateway/platform';
import type { EditImagesRequest, EditImagesResponse, GenerateImagesRequest, GenerateImagesResponse, Usage } from '@gateway/proto';
import { reportedUsageResponse } from '../observability/gen-ai-telemetry.js';
import type { AdapterImageRequest, AdapterImageResult } from '../providers/provider-adapter.js';
import type { Candidate } from '../strategies/index.js';
import { countTextTokens, emptyUsage } from '../usage/token-counter.js';
import { canEditImages, canGenerateImages, type RoutingTarget } from './candidates.js';
import { noUpstream, type AttemptPolicy, type FailoverPolicy } from './failover.js';
import type { Reservation } from './reservation.js';
import type { RoutingCore } from './routing-core.js';

/** Output tokens metered per image when the provider counted none (spec §2.1). */
const IMAGE_OUTPUT_TOKENS_DEFAULT = 2_048;
const IMAGE_SIZE = /^[1-9]\d{0,4}x[1-9]\d{0,4}$/;
/** An image attempt's GenAI usage: what its provider reported (text and image tokens in, image tokens out). */
const IMAGES_POLICY: FailoverPolicy<AdapterImageResult> = { response: (result) => reportedUsageResponse(result.usage) };

export function generateImages(core: RoutingCore, raw: GenerateImagesRequest, signal: CallerSignal): Promise<GenerateImagesResponse> {
  return core.admitted(raw.context, raw.modelId, 'images.generations', (hold) => generateImagesHolding(core, raw, signal, hold));
}

async function generateImagesHolding(core: RoutingCore, raw: GenerateImagesRequest, signal: CallerSignal, hold: Reservation): Promise<GenerateImagesResponse> {
  const target = core.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canGenerateImages);
  const request = imageRequest(target, raw);
  await screenPrompt(core, target, raw.prompt, signal);
  const { result, candidate } = await core.withFailover(target, signal, (candidate, attemptSignal) =>
    candidate.adapter.generateImages!({ ...request, upstreamModel: candidate.offer.upstreamModel }, attemptSignal),
  IMAGES_POLICY);
  return imagesAnswer(core, target, raw, result, candidate.offer.providerId);
}

export function editImages(core: RoutingCore, raw: EditImagesRequest, signal: CallerSignal): Promise<EditImagesResponse> {
  const generation = raw.generation;
  return core.admitted(generation?.context, generation?.modelId ?? '', 'images.edits', (hold) => editImagesHolding(core, raw, signal, hold));
}

async function editImagesHolding(core: RoutingCore, raw: EditImagesRequest, signal: CallerSignal, hold: Reservation): Promise<EditImagesResponse> {
  const generation = raw.generation;
  const target = core.resolve(hold, generation?.modelId ?? '', generation?.routingStrategy ?? '', 0, () => '', canEditImages);
  if (!generation) throw errors.invalidRequest('EditImagesRequest.generation is required', 'generation');
  const request = imageRequest(target, generation);
  if (raw.images.length === 0) throw errors.invalidRequest('at least one image is required', 'image');
  // An edit's prompt is screened like a generation's (issue 29: edits skipped the screen).
  await screenPrompt(core, target, generation.prompt, signal);
  const asInput = (image: { data: Uint8Array; filename: string; mediaType: string }) => ({ data: image.data, filename: image.filename, mediaType: image.mediaType });
  const { result, candidate } = await core.withFailover(target, signal, (candidate, attemptSignal) =>
    candidate.adapter.editImages!(
      { ...request, upstreamModel: candidate.offer.upstreamModel, images: raw.images.map(asInput), mask: raw.mask ? asInput(raw.mask) : undefined },
      attemptSignal,
    ),
  IMAGES_POLICY);
  return { result: await imagesAnswer(core, target, generation, result, candidate.offer.providerId) };
}

/** Checks n and size (the edge checked them too) and builds the adapter request. */
function imageRequest(target: RoutingTarget, raw: GenerateImagesRequest): Omit<AdapterImageRequest, 'upstreamModel'> {
  const n = raw.n || 1;
  const maxImages = target.model.maxImages ?? 1;
  const refuse = (message: string, param: string) => errors.invalidRequest(message, param);
  if (n > maxImages) throw refuse(`n must be at most ${maxImages} for ${target.model.id}`, 'n');
  if (raw.size !== undefined && raw.size !== 'auto' && !IMAGE_SIZE.test(raw.size)) {
    throw refuse("size must be written '{width}x{height}', e.g. '1024x1024', or be 'auto'", 'size');
  }
  if (!raw.prompt) throw refuse('prompt must not be empty', 'prompt');
  return {
    prompt: raw.prompt,
    n,
    size: raw.size,
    // Only for a model that lists them: the edge decided (ENDPOINT_PARAMETERS in libs/platform).
    quality: raw.quality,
    background: raw.background,
  };
}

/**
 * The catalog's moderation model judges an image prompt before any image is made. Flagged: 403 and the
 * reservation released (nothing charged). Screening is the gateway's own cost: no usage event of its own.
 * A configured screen that cannot answer refuses the request rather than skipping the check.
 */
async function screenPrompt(core: RoutingCore, target: RoutingTarget, prompt: string, signal: CallerSignal): Promise<void> {
  const screenId = core.options.catalog.moderationModel;
  if (!screenId) return;
  const screen = core.options.catalog.model(screenId);
  const candidates = (screen?.offers ?? []).flatMap((offer) => {
    const adapter = offer.endpoints.includes('moderations') ? core.options.catalog.provider(offer.providerId)?.adapter : undefined;
    return adapter?.moderate ? [{ offer, adapter }] : [];
  });
  const { result: verdict } = await core.withFailover(
    target,
    signal,
    (candidate, control) => candidate.adapter.moderate!({ upstreamModel: candidate.offer.upstreamModel, input: { form: 'string', text: prompt } }, control),
    { attempts: screenAttempts(candidates) },
  );
  const result = verdict.results[0];
  if (!result) {
    target.logger.warn({ moderation_model: screenId }, 'prompt screening answered no verdict; image request refused');
    throw noUpstream();
  }
  if (!result.flagged) return;
  const flagged = Object.entries(result.categories).filter(([, value]) => value).map(([name]) => name);
  throw new GatewayError(
    GrpcStatus.PERMISSION_DENIED,
    ErrorReason.ERROR_REASON_FORBIDDEN,
    `The prompt was flagged by content moderation (${flagged.join(', ') || 'policy'}); no image was generated and nothing was charged.`,
    { code: 'content_policy_violation', param: 'prompt' },
  );
}

/**
 * The screen's attempts: the moderation model's offers instead of the request's candidates. It is the
 * gateway's own check, so every failure moves on (a verdict too), none is recorded against a provider or
 * named on the request's hold, and a caller who leaves is not charged for it.
 */
function screenAttempts(candidates: readonly Candidate[]): AttemptPolicy {
  return {
    candidates: () => candidates,
    recorded: false,
    begin() {},
    cancelled() {},
    failed: () => 'next',
    exhausted(target, lastFailure) {
      target.logger.warn({ err: lastFailure }, 'prompt screening unavailable; image request refused');
    },
  };
}

async function imagesAnswer(core: RoutingCore, target: RoutingTarget, raw: GenerateImagesRequest, result: AdapterImageResult, providerId: string): Promise<GenerateImagesResponse> {
  const reported = result.usage;
  const pricesText = target.model.pricing?.perInputTextToken !== undefined;
  // Zero-completion insurance: no image came back, so none is charged (and no output is metered).
  const noImages = result.images.length === 0;
  const hold = target.hold;
  hold.firstByteAt = Date.now();
  hold.nativeUsage = reported;
  hold.insuredReason = noImages ? 'no_images' : '';
  const usage: Usage = {
    ...emptyUsage(),
    outputImageTokens: noImages ? 0 : reported?.outputImageTokens || IMAGE_OUTPUT_TOKENS_DEFAULT * result.images.length,
    // Spec §2.1: zero input tokens on a model that prices no input text token.
    inputTextTokens: pricesText ? reported?.inputTextTokens || countTextTokens(raw.prompt) : 0,
    inputImageTokens: reported?.inputImageTokens ?? 0,
    estimated: !reported,
  };
  await core.recordServed(target, providerId, usage);
  return {
    created: BigInt(Math.floor(Date.now() / 1000)),
    data: result.images.map((image) => ({
      b64Json: Buffer.from(image.data).toString('base64'),
      ...(image.revisedPrompt ? { revisedPrompt: image.revisedPrompt } : {}),
    })),
    usage,
    providerId,
    routingStrategy: target.strategyName,
    // The usage event's prices (the edge shows the charge as usage.cost).
    prices: target.model.pricing,
  };
}
