import { createHash } from 'node:crypto';
import type { AdapterModerateRequest, AdapterModerationResult } from '../provider-adapter.js';

/**
 * The simulated moderation model: a keyword list per category (a hit scores 0.9 and flags it), every
 * other category a small deterministic score below 0.1. Image inputs are judged by their URL text and
 * only on the categories OpenAI checks images for.
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

export function simulateModeration(input: AdapterModerateRequest['inputs'][number]): AdapterModerationResult {
  const isImage = input.type === 'image_url';
  const text = (isImage ? input.url : input.text).toLowerCase();
  const categories: Record<string, boolean> = {};
  const categoryScores: Record<string, number> = {};
  const categoryAppliedInputTypes: Record<string, string[]> = {};
  // The text is hashed once, not once per category (a megabyte of input was 13 passes).
  const textDigest = createHash('sha256').update(text).digest();
  for (const [category, words] of Object.entries(KEYWORDS)) {
    const checked = !isImage || IMAGE_CATEGORIES.has(category);
    const hit = checked && words.some((word) => text.includes(word));
    const digest = createHash('sha256').update(category).update('\0').update(textDigest).digest();
    categories[category] = hit;
    categoryScores[category] = hit ? FLAG_SCORE : checked ? digest.readUInt16BE(0) / 65_535 / 10 : 0;
    categoryAppliedInputTypes[category] = checked ? [isImage ? 'image_url' : 'text'] : [];
  }
  return { flagged: Object.values(categories).some(Boolean), categories, categoryScores, categoryAppliedInputTypes };
}
