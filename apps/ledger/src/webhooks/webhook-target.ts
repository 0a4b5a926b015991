import { createHmac, randomBytes } from 'node:crypto';
import { lookup } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/*
 * Where a webhook may be sent, and how it is signed (docs/governance.md "Webhooks").
 *
 * SSRF guard: a receiver is an `https` URL whose host resolves only to public addresses. Loopback,
 * private (RFC 1918, CGNAT), link-local (with the 169.254.169.254 metadata address), unique-local,
 * multicast, reserved and the IPv4-mapped forms of all of these are refused. The check runs at
 * registration (a literal address, or a name that resolves to a refused one) AND at every send, inside
 * the socket's own DNS lookup, so the address that is checked is the address connected to (a name that
 * later resolves elsewhere — DNS rebinding — is refused at send time). An operator may allow plain
 * http and private addresses (GATEWAY_WEBHOOKS_ALLOW_PRIVATE=1), for receivers inside their network and
 * for tests.
 */

const refused = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['198.51.100.0', 24], ['203.0.113.0', 24],
  ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) refused.addSubnet(network, prefix, 'ipv4');
for (const [network, prefix] of [
  ['::', 128], ['::1', 128], ['64:ff9b::', 96], ['100::', 64], ['2001:db8::', 32], ['fc00::', 7], ['fe80::', 10], ['fec0::', 10], ['ff00::', 8],
] as const) refused.addSubnet(network, prefix, 'ipv6');

/** Whether an address is one a webhook may not reach (without the operator's permission). */
export function isRefusedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return refused.check(address, 'ipv4');
  if (family === 6) {
    // ::ffff:a.b.c.d and ::a.b.c.d reach the IPv4 address: judge that.
    const mapped = /^::(?:ffff:)?(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    if (mapped) return refused.check(mapped[1]!, 'ipv4');
    const hexMapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
    if (hexMapped) {
      const high = Number.parseInt(hexMapped[1]!, 16);
      const low = Number.parseInt(hexMapped[2]!, 16);
      return refused.check(`${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`, 'ipv4');
    }
    return refused.check(address, 'ipv6');
  }
  return true;
}

export const MAX_WEBHOOK_URL_LENGTH = 2_048;

/** Why a receiver URL is refused, or null when it may be registered. Resolves its host name (bounded). */
export async function refuseWebhookUrl(value: string, allowPrivate: boolean, resolveTimeoutMs = 3_000): Promise<string | null> {
  if (value.length > MAX_WEBHOOK_URL_LENGTH) return `url must be at most ${MAX_WEBHOOK_URL_LENGTH} characters`;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'url must be an absolute URL';
  }
  if (url.protocol !== 'https:' && !(allowPrivate && url.protocol === 'http:')) return 'url must use https';
  if (url.username !== '' || url.password !== '') return 'url must not carry credentials';
  if (url.hash !== '') return 'url must not have a fragment';
  if (allowPrivate) return null;
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (isIP(host) !== 0) return isRefusedAddress(host) ? 'url must not point to a loopback, private, link-local or metadata address' : null;
  if (host === 'localhost' || host.endsWith('.localhost')) return 'url must not point to a loopback, private, link-local or metadata address';
  const addresses = await new Promise<string[] | null>((resolve) => {
    const timer = setTimeout(() => resolve(null), resolveTimeoutMs);
    lookup(host, { all: true }, (error, found) => {
      clearTimeout(timer);
      resolve(error ? [] : found.map((entry) => entry.address));
    });
  });
  // A name that does not resolve now may later: it is checked again at every send.
  if (addresses === null || addresses.length === 0) return null;
  return addresses.some(isRefusedAddress) ? 'url must not point to a loopback, private, link-local or metadata address' : null;
}

/**
 * The socket's DNS lookup for a send: resolves as usual and fails the connection when any address is
 * refused, so what was checked is what is connected to.
 */
export function guardedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    lookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, '', 0);
      const list = addresses as unknown as Array<{ address: string; family: number }>;
      const bad = allowPrivate ? undefined : list.find((entry) => isRefusedAddress(entry.address));
      if (bad !== undefined || list.length === 0) {
        const refusal = Object.assign(new Error(`webhook target ${hostname} resolves to a refused address ${bad?.address ?? '(none)'}`), { code: 'EWEBHOOKREFUSED' });
        return callback(refusal, '', 0);
      }
      if ((options as { all?: boolean }).all) return (callback as unknown as (error: null, all: typeof list) => void)(null, list);
      return callback(null, list[0]!.address, list[0]!.family);
    });
  };
}

/** A new signing secret: `whsec_` and 24 random bytes in base64 (the Standard Webhooks form). */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` keyed with the secret's base64-decoded bytes. */
export function signWebhook(secret: string, messageId: string, timestampSeconds: number, body: string): string {
  const key = Buffer.from(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret, 'base64');
  return `v1,${createHmac('sha256', key).update(`${messageId}.${timestampSeconds}.${body}`).digest('base64')}`;
}
