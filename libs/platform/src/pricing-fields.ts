import type { Pricing } from '@gateway/proto';

/**
 * Every price key of the catalog with its name in the HTTP API and the config file (spec §2.6): one
 * table for the edge's /v1/models and gatewayctl's `catalog show`, so the two cannot drift apart.
 */
export const PRICING_FIELDS: ReadonlyArray<readonly [keyof Pricing, string]> = [
  ['perInputToken', 'per_input_token'],
  ['perCachedInputToken', 'per_cached_input_token'],
  ['perCacheWriteInputToken', 'per_cache_write_input_token'],
  ['perOutputToken', 'per_output_token'],
  ['perInputAudioToken', 'per_input_audio_token'],
  ['perOutputAudioToken', 'per_output_audio_token'],
  ['perInputAudioHour', 'per_input_audio_hour'],
  ['perOutputAudioHour', 'per_output_audio_hour'],
  ['perOutputTextToken', 'per_output_text_token'],
  ['perInputTextCharacter', 'per_input_text_character'],
  ['perOutputTextCharacter', 'per_output_text_character'],
  ['perOutputImageToken', 'per_output_image_token'],
  ['perInputTextToken', 'per_input_text_token'],
  ['perInputImageToken', 'per_input_image_token'],
  ['perToken', 'per_token'],
];
