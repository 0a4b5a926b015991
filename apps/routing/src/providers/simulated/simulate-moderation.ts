import { createHash } from 'node:crypto';
import type { AdapterModerateRequest, AdapterModerationPart, AdapterModerationResult } from '../provider-adapter.js';

/**
 * The simulated moderation model: a keyword list per category (a hit scores 0.9 and flags it), every
 * other category a small deterministic score below 0.1. Images are judged by their URL text and only on
 * the categories OpenAI checks images for. One result per input as OpenAI answers: a string or each of an
 * array of strings is an input; an array of text and image parts is ONE input, whose
 * `category_applied_input_types` name the part types (`text`, `image`) each category was checked on.
 */
const KEYWORDS: Readonly<Record<string, readonly string[]>> = {
  harassment: ['idiot', 'loser', 'stupid'],
  'harassment/threatening': ['i will hurt you', 'i will kill you'],
  hate: ['hate all'],
  'hate/threatening': ['exterminate'],
  illicit: ['make meth', 'counterfeit'],
  'illicit/violent': ['build a bomb', 'make a bomb'],
  'self-harm': ['self-harm', 'hurt myself'],
  'self-harm/intent': ['i want to die'],
  'self-harm/instructions': ['how to self-harm'],
  sexual: ['explicit sex', 'nsfw'],
  'sexual/minors': ['minor nsfw'],
  violence: ['kill', 'murder', 'blood', 'weapon'],
  'violence/graphic': ['gore', 'dismember'],
};
const IMAGE_CATEGORIES = new Set(['self-harm', 'self-harm/intent', 'self-harm/instructions', 'sexual', 'violence', 'violence/graphic']);
const FLAG_SCORE = 0.9;

export const MODERATION_CATEGORIES = Object.keys(KEYWORDS);

/** The results for a request's input: one per string of an array of strings, else one. */
export function simulateModerations(input: AdapterModerateRequest['input']): AdapterModerationResult[] {
  if (input.form === 'string') return [simulateModeration([{ type: 'text', text: input.text }])];
  if (input.form === 'strings') return input.texts.map((text) => simulateModeration([{ type: 'text', text }]));
  return [simulateModeration(input.parts)];
}

/** One input's verdict, from its parts (a string is one text part). */
export function simulateModeration(parts: readonly AdapterModerationPart[]): AdapterModerationResult {
  const judged = parts.map((part) => ({ type: part.type === 'image_url' ? 'image' : 'text', text: (part.type === 'image_url' ? part.url : part.text).toLowerCase() }));
  const categories: Record<string, boolean> = {};
  const categoryScores: Record<string, number> = {};
  const categoryAppliedInputTypes: Record<string, string[]> = {};
  // Each part is hashed once, not once per category (a megabyte of input was 13 passes).
  const digests = judged.map((part) => createHash('sha256').update(part.text).digest());
  for (const [category, words] of Object.entries(KEYWORDS)) {
    const checked = judged.flatMap((part, index) => (part.type === 'text' || IMAGE_CATEGORIES.has(category) ? [index] : []));
    const hit = checked.some((index) => words.some((word) => judged[index]!.text.includes(word)));
    const seed = createHash('sha256').update(category);
    for (const index of checked) seed.update('\0').update(digests[index]!);
    categories[category] = hit;
    categoryScores[category] = hit ? FLAG_SCORE : checked.length > 0 ? seed.digest().readUInt16BE(0) / 65_535 / 10 : 0;
    categoryAppliedInputTypes[category] = [...new Set(checked.map((index) => judged[index]!.type))];
  }
  return { flagged: Object.values(categories).some(Boolean), categories, categoryScores, categoryAppliedInputTypes };
}
