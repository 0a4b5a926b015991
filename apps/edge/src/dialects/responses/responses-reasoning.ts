import type { ReasoningPart } from '@gateway/proto';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';

/*
 * A reasoning item's `encrypted_content` (spec §1, DESIGN §6): the gateway's issuer tag around the
 * provider's own value. One field has to carry either kind of provider value — a thinking block's
 * signature (its text travels in `summary`) or opaque encrypted reasoning (redacted thinking, an
 * OpenAI encrypted item) — so the tagged value starts with a letter saying which:
 *
 *     tags.tag(providerId, 's:' + signature)    or    tags.tag(providerId, 'e:' + encryptedData)
 *
 * The letter is inside the MAC: a client cannot turn a signature into encrypted data or back.
 */
const SIGNATURE = 's:';
const ENCRYPTED = 'e:';

/** The `encrypted_content` of a canonical reasoning part, or undefined when its provider issued nothing to carry. */
export function encryptedContentOf(signature: string, encryptedData: string, providerId: string, tags: ReasoningTags): string | undefined {
  // A part holds one or the other (a signed thinking block, or an opaque one); a signature wins if both came.
  if (signature) return tags.tag(providerId, SIGNATURE + signature);
  if (encryptedData) return tags.tag(providerId, ENCRYPTED + encryptedData);
  return undefined;
}

/**
 * A replayed reasoning item as a canonical part, or undefined when it must go to no provider: its
 * `encrypted_content` is absent or carries no valid tag (foreign, edited, or issued under another
 * key). Such an item is dropped whole, summary text included: that text belongs to reasoning whose
 * issuer the gateway cannot vouch for, and reasoning goes back only to the provider that issued it
 * (spec §1). Reasoning a provider gave as plain text (no signature, nothing encrypted) is shown to
 * the client but never replayed: no provider's wire takes it back unsigned anyway.
 */
export function reasoningPartOf(summaryText: string, encryptedContent: string | null | undefined, tags: ReasoningTags): ReasoningPart | undefined {
  if (encryptedContent == null || encryptedContent === '') return undefined;
  const issued = tags.untag(encryptedContent);
  if (issued.providerId === '') return undefined;
  if (issued.value.startsWith(SIGNATURE)) {
    return { text: summaryText, signature: issued.value.slice(SIGNATURE.length), encryptedData: '', providerId: issued.providerId };
  }
  if (issued.value.startsWith(ENCRYPTED)) {
    return { text: summaryText, signature: '', encryptedData: issued.value.slice(ENCRYPTED.length), providerId: issued.providerId };
  }
  // Tagged by this gateway but not in this dialect's encoding (e.g. a chat reasoning_details value): not ours to guess.
  return undefined;
}
