/**
 * Endpoint names (DESIGN.md §4): what a catalog offer serves, what `supported_endpoints` lists, and
 * what each inference route asks the catalog for. One list, so the catalog's validation and the
 * edge's routes cannot drift apart.
 */
export const ENDPOINT_NAMES = [
  'chat.completions',
  'messages',
  'responses',
  'embeddings',
  'moderations',
  'images.generations',
  'images.edits',
  'audio.speech',
  'audio.transcriptions',
  'audio.translations',
] as const;

export type EndpointName = (typeof ENDPOINT_NAMES)[number];

/**
 * Most bytes a background response's request may take in its converted form (files read): the jobs service's
 * bound on what it stores for a run, which the edge checks first to refuse with a 400 naming it.
 */
export const BACKGROUND_REQUEST_MAX_BYTES = 16 * 1024 * 1024;
