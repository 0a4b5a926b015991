import { errors, type CallerSignal } from '@gateway/platform';
import { ModerationInputForm, type EmbedRequest, type EmbedResponse, type ModerateRequest, type ModerateResponse, type Usage } from '@gateway/proto';
import { MODERATION_IMAGE_TOKENS, ProviderError, type AdapterEmbedResult, type AdapterModerateRequest, type AdapterModerateResult, type AdapterModerationPart } from '../providers/provider-adapter.js';
import { reportedUsageResponse } from '../observability/gen-ai-telemetry.js';
import { countTextTokens, emptyUsage, tokenizerBudget } from '../usage/token-counter.js';
import { canEmbed, canModerate } from './candidates.js';
import type { FailoverPolicy } from './failover.js';
import type { Reservation } from './reservation.js';
import type { RoutingCore } from './routing-core.js';

/** An embeddings attempt's GenAI usage: the provider's report (the gateway's own count is not made per attempt). */
const EMBED_POLICY: FailoverPolicy<AdapterEmbedResult> = { response: (result) => ({ usage: result.usage }) };
/** A moderation attempt's: the input tokens its provider reported, no output. */
const MODERATE_POLICY: FailoverPolicy<AdapterModerateResult> = { response: (result) => reportedUsageResponse(result.usage, true) };

/** Most inputs in one embeddings request (OpenAI's own bound). */
const MAX_EMBEDDING_INPUTS = 2_048;

export function embed(core: RoutingCore, raw: EmbedRequest, signal: CallerSignal): Promise<EmbedResponse> {
  return core.admitted(raw.context, raw.modelId, 'embeddings', (hold) => embedHolding(core, raw, signal, hold));
}

async function embedHolding(core: RoutingCore, raw: EmbedRequest, signal: CallerSignal, hold: Reservation): Promise<EmbedResponse> {
  const target = core.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canEmbed);
  if (raw.texts.length === 0 && raw.tokenInputs.length === 0) throw errors.invalidRequest('input must not be empty', 'input');
  if (raw.texts.length > MAX_EMBEDDING_INPUTS || raw.tokenInputs.length > MAX_EMBEDDING_INPUTS) {
    throw errors.invalidRequest(`input holds more than ${MAX_EMBEDDING_INPUTS} items`, 'input');
  }
  // `dimensions` comes only for a model that lists it: the edge decided (ENDPOINT_PARAMETERS in libs/platform).
  const dimensions = raw.dimensions;
  const { result, candidate } = await core.withFailover(target, signal, (candidate, attemptSignal) =>
    candidate.adapter.embed!(
      { upstreamModel: candidate.offer.upstreamModel, texts: raw.texts, tokenInputs: raw.tokenInputs.map((input) => input.ids), dimensions },
      attemptSignal,
    ),
  EMBED_POLICY);
  // Counted only when the provider reported nothing: the tokenizer is synchronous work.
  const counted = () => {
    const budget = tokenizerBudget();
    return raw.texts.reduce((sum, text) => sum + countTextTokens(text, budget), 0) + raw.tokenInputs.reduce((sum, input) => sum + input.ids.length, 0);
  };
  const usage: Usage =
    result.usage && result.usage.inputTokens > 0 ? result.usage : { ...emptyUsage(), inputTokens: counted(), estimated: true };
  await core.recordServed(target, candidate.offer.providerId, usage);
  return {
    modelId: target.model.id,
    embeddings: result.embeddings.map((values) => ({ values })),
    usage,
    providerId: candidate.offer.providerId,
    routingStrategy: target.strategyName,
    // The usage event's prices (the edge shows the charge as usage.cost).
    prices: target.model.pricing,
  };
}

export function moderate(core: RoutingCore, raw: ModerateRequest, signal: CallerSignal): Promise<ModerateResponse> {
  return core.admitted(raw.context, raw.modelId, 'moderations', (hold) => moderateHolding(core, raw, signal, hold));
}

async function moderateHolding(core: RoutingCore, raw: ModerateRequest, signal: CallerSignal, hold: Reservation): Promise<ModerateResponse> {
  const target = core.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canModerate);
  const input = moderationInput(raw);
  const expected = input.form === 'strings' ? input.texts.length : 1;
  // An answer with another number of results than inputs is malformed: the attempt's failure (counted
  // against that provider, the next one tried), not a success the request then refuses.
  const { result, candidate } = await core.withFailover(target, signal, async (candidate, attemptSignal) => {
    const answer = await candidate.adapter.moderate!({ upstreamModel: candidate.offer.upstreamModel, input }, attemptSignal);
    if (answer.results.length !== expected) {
      throw new ProviderError('connection', `expected ${expected} moderation results, got ${answer.results.length}`);
    }
    return answer;
  }, MODERATE_POLICY);
  // Counted only when the provider reported nothing: the tokenizer is synchronous work.
  const counted = () => {
    const budget = tokenizerBudget();
    const parts: AdapterModerationPart[] =
      input.form === 'string' ? [{ type: 'text', text: input.text }] : input.form === 'strings' ? input.texts.map((text) => ({ type: 'text', text })) : input.parts;
    return parts.reduce((sum, part) => sum + (part.type === 'text' ? countTextTokens(part.text, budget) : MODERATION_IMAGE_TOKENS), 0);
  };
  const usage: Usage = result.usage && result.usage.inputTokens > 0 ? result.usage : { ...emptyUsage(), inputTokens: counted(), estimated: true };
  await core.recordServed(target, candidate.offer.providerId, usage);
  return {
    id: `modr-${target.requestId.replace(/[^A-Za-z0-9]/g, '').slice(0, 32)}`,
    modelId: target.model.id,
    results: result.results.map((item) => ({
      flagged: item.flagged,
      categories: item.categories,
      categoryScores: item.categoryScores,
      categoryAppliedInputTypes: Object.fromEntries(Object.entries(item.categoryAppliedInputTypes).map(([name, types]) => [name, { types }])),
    })),
    usage,
    providerId: candidate.offer.providerId,
  };
}

/** The request's input in the form the client wrote it (ModerationInputForm); a 400 when the parts do not fit it. */
function moderationInput(raw: ModerateRequest): AdapterModerateRequest['input'] {
  const parts = raw.inputs.flatMap((input): AdapterModerationPart[] => {
    const value = input.input;
    if (value?.$case === 'text') return [{ type: 'text', text: value.value }];
    if (value?.$case === 'imageUrl') return [{ type: 'image_url', url: value.value }];
    return [];
  });
  if (parts.length === 0) throw errors.invalidRequest('input must not be empty', 'input');
  const texts = parts.flatMap((part) => (part.type === 'text' ? [part.text] : []));
  let form = raw.inputForm;
  if (form === ModerationInputForm.MODERATION_INPUT_FORM_UNSPECIFIED) {
    form = texts.length === parts.length ? ModerationInputForm.MODERATION_INPUT_FORM_STRINGS : ModerationInputForm.MODERATION_INPUT_FORM_MULTIMODAL;
  }
  switch (form) {
    case ModerationInputForm.MODERATION_INPUT_FORM_STRING:
      if (parts.length !== 1 || texts.length !== 1) throw errors.invalidRequest('a string input is exactly one text', 'input');
      return { form: 'string', text: texts[0]! };
    case ModerationInputForm.MODERATION_INPUT_FORM_STRINGS:
      if (texts.length !== parts.length) throw errors.invalidRequest('an array of strings holds only texts', 'input');
      return { form: 'strings', texts };
    case ModerationInputForm.MODERATION_INPUT_FORM_MULTIMODAL:
      return { form: 'multimodal', parts };
    default:
      throw errors.invalidRequest('unknown moderation input form', 'input');
  }
}
