import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Reasoning provenance (spec §1, DESIGN §6). Every signature, redacted-thinking datum and encrypted
 * reasoning item the gateway returns is wrapped in a tag naming the provider that issued it:
 *
 *     gw1.<provider id, base64url>.<MAC, base64url>.<the provider's own value>
 *
 * The MAC (HMAC-SHA256 under the gateway's tag key, cut to 128 bits) covers the provider id and the
 * value, so a client cannot move reasoning from one provider to another by editing the tag. When a
 * client replays a conversation, the tag is checked and removed: the canonical request carries the
 * provider's own value and its issuer, and the router sends it only to that provider. Reasoning with
 * no tag, an unknown version or a wrong MAC is foreign to every provider (issuer ''), and so removed
 * before any provider sees it. A tool call's own signature (chat completions'
 * `tool_calls[].extra_content.google.thought_signature`) is tagged the same way (tagCall / untagCall).
 * Every edge of a deployment must share the key (GATEWAY_REASONING_TAG_KEY),
 * or reasoning tagged by one edge is foreign at another.
 */
const VERSION = 'gw1';
const MAC_BYTES = 16;
/** Inside the MAC of a tool call's signature (tagCall). */
const CALL = 'fc:';

export interface UntaggedReasoning {
  /** The provider that issued the value; '' when the tag is absent or invalid. */
  providerId: string;
  /** The provider's own value ('' when the tag is invalid: nothing of it may be forwarded). */
  value: string;
}

export class ReasoningTags {
  private readonly key: Buffer;

  /** `key`: at least 16 bytes of secret; a random one when absent (tags then die with the process). */
  constructor(key?: string | Buffer) {
    const material = key === undefined || key.length === 0 ? randomBytes(32) : Buffer.isBuffer(key) ? key : Buffer.from(key, 'utf8');
    if (material.length < 16) throw new Error('the reasoning tag key must hold at least 16 bytes');
    this.key = material;
  }

  /** The value as the client receives it. An empty value stays empty (nothing to carry). */
  tag(providerId: string, value: string): string {
    if (value === '') return '';
    const provider = Buffer.from(providerId, 'utf8').toString('base64url');
    return `${VERSION}.${provider}.${this.mac(providerId, value).toString('base64url')}.${value}`;
  }

  /** What a client sent back: the issuer and the provider's own value, or foreign ('' issuer, '' value). */
  untag(tagged: string): UntaggedReasoning {
    if (!tagged.startsWith(`${VERSION}.`)) return FOREIGN;
    const providerEnd = tagged.indexOf('.', VERSION.length + 1);
    if (providerEnd < 0) return FOREIGN;
    const macEnd = tagged.indexOf('.', providerEnd + 1);
    if (macEnd < 0) return FOREIGN;
    const providerId = Buffer.from(tagged.slice(VERSION.length + 1, providerEnd), 'base64url').toString('utf8');
    const sent = Buffer.from(tagged.slice(providerEnd + 1, macEnd), 'base64url');
    const value = tagged.slice(macEnd + 1);
    if (providerId === '' || sent.length !== MAC_BYTES || !timingSafeEqual(sent, this.mac(providerId, value))) return FOREIGN;
    return { providerId, value };
  }

  /**
   * A tool call's own signature (Gemini's thoughtSignature on a functionCall part) as the client receives
   * it: tagged like reasoning, with `fc:` before the provider's value inside the MAC, so a call signature
   * and a reasoning signature cannot stand in for each other.
   */
  tagCall(providerId: string, signature: string): string {
    return signature === '' ? '' : this.tag(providerId, CALL + signature);
  }

  /** A call signature a client sent back: its issuer and the provider's own value, or foreign ('', ''). */
  untagCall(tagged: string): UntaggedReasoning {
    const issued = this.untag(tagged);
    if (issued.providerId === '' || !issued.value.startsWith(CALL) || issued.value.length === CALL.length) return FOREIGN;
    return { providerId: issued.providerId, value: issued.value.slice(CALL.length) };
  }

  private mac(providerId: string, value: string): Buffer {
    return createHmac('sha256', this.key).update(providerId).update('\0').update(value).digest().subarray(0, MAC_BYTES);
  }
}

const FOREIGN: UntaggedReasoning = Object.freeze({ providerId: '', value: '' });
