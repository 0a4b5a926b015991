import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { edgeErrors } from '../../errors.js';

/*
 * The compaction item /v1/responses/compact hands out (compaction.ts), sealed and opened. Its
 * `encrypted_content` is issuer-tagged like encrypted reasoning (canonical/reasoning-tags.ts): the
 * gateway's MAC over the provider that wrote the summary and the summary itself, with a kind letter
 * inside the MAC so a reasoning value cannot pass for a compaction or back:
 *
 *     tags.tag(providerId, 'c:' + base64url(summary))
 *
 * Sent back in a later `input`, the item is checked and expanded into a user message carrying the
 * summary, which every upstream kind reads. One the gateway did not issue (forged, edited, another
 * deployment's key, OpenAI's own) is a 400: the conversation it stood for cannot be rebuilt.
 */

const COMPACTION = 'c:';

/** What the gateway has the model do with the conversation (the last user turn of the summary request). */
export const SUMMARY_PROMPT =
  'Summarise the conversation above for another model that will continue it without seeing it. Keep what it needs to ' +
  'carry on: the goals and instructions given, decisions made, work done and its results (files, commands and tool ' +
  'outputs that matter), what is still open and the next step. Be concise and factual, and write only the summary.';

/** How an expanded compaction item opens, ahead of the summary. */
export const SUMMARY_HEADER = 'Summary of the earlier conversation, which it replaces:';

/** The `encrypted_content` of a compaction item carrying `summary`, written by `providerId`. */
export function sealCompaction(summary: string, providerId: string, tags: ReasoningTags): string {
  // The tag needs an issuer; a router answer always names its provider, the fallback only keeps the tag valid.
  return tags.tag(providerId || 'gateway', COMPACTION + Buffer.from(summary, 'utf8').toString('base64url'));
}

/** The summary a compaction item carries, or a 400 naming `path` when the gateway did not issue it. */
export function openCompaction(encryptedContent: string, tags: ReasoningTags, path: string): string {
  const issued = tags.untag(encryptedContent);
  if (issued.providerId === '' || !issued.value.startsWith(COMPACTION)) {
    throw edgeErrors.invalidRequest(
      `${path}: this compaction item was not issued by this gateway, or was altered; send back the item /v1/responses/compact returned, unchanged.`,
      path,
      'invalid_encrypted_content',
    );
  }
  return Buffer.from(issued.value.slice(COMPACTION.length), 'base64url').toString('utf8');
}

/** The text of the user message a compaction item becomes before any provider. */
export function compactionText(summary: string): string {
  return `${SUMMARY_HEADER}\n\n${summary}`;
}
