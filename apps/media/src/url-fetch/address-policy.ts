import { isIP } from 'node:net';

/**
 * Which IP addresses a URL fetch may connect to. Pure: the fetcher resolves a host name first and
 * asks this about every address it got (and again after each redirect), so a name pointing at an
 * internal address is refused exactly like the literal address.
 *
 * Only globally routable unicast is allowed. Everything below is refused, with the reason named so a
 * caller (and a log) can tell why.
 */

export type RefusalReason =
  | 'metadata'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'unspecified'
  | 'multicast'
  | 'reserved'
  | 'malformed';

export type AddressVerdict = { allowed: true } | { allowed: false; reason: RefusalReason };

export interface AddressPolicyOptions {
  /**
   * Lets loopback through (127.0.0.0/8, ::1) and nothing else. Only tests that serve files from a
   * loopback server set it, and only through the media service's start options — never from the
   * environment, so no deployment can switch it on by accident.
   */
  allowLoopback?: boolean;
}

interface Range {
  /** Network address as a bigint of the family's width. */
  network: bigint;
  prefixLength: number;
  reason: RefusalReason;
}

function ipv4Range(address: string, prefixLength: number, reason: RefusalReason): Range {
  return { network: parseIPv4(address) as bigint, prefixLength, reason };
}

function ipv6Range(address: string, prefixLength: number, reason: RefusalReason): Range {
  return { network: parseIPv6(address) as bigint, prefixLength, reason };
}

// Most specific first: the first match names the reason.
const IPV4_RANGES: readonly Range[] = [
  // Cloud instance metadata (AWS, GCP, Azure, OpenStack); also inside link-local below.
  ipv4Range('169.254.169.254', 32, 'metadata'),
  // Alibaba Cloud's metadata address.
  ipv4Range('100.100.100.200', 32, 'metadata'),
  ipv4Range('0.0.0.0', 8, 'unspecified'), // "this network"; 0.0.0.0 reaches the local host on Linux
  ipv4Range('10.0.0.0', 8, 'private'),
  ipv4Range('100.64.0.0', 10, 'private'), // carrier-grade NAT shared space
  ipv4Range('127.0.0.0', 8, 'loopback'),
  ipv4Range('169.254.0.0', 16, 'link-local'),
  ipv4Range('172.16.0.0', 12, 'private'),
  ipv4Range('192.0.0.0', 24, 'reserved'), // IETF protocol assignments
  ipv4Range('192.0.2.0', 24, 'reserved'), // documentation
  ipv4Range('192.88.99.0', 24, 'reserved'), // 6to4 relay anycast
  ipv4Range('192.168.0.0', 16, 'private'),
  ipv4Range('198.18.0.0', 15, 'reserved'), // benchmarking
  ipv4Range('198.51.100.0', 24, 'reserved'), // documentation
  ipv4Range('203.0.113.0', 24, 'reserved'), // documentation
  ipv4Range('224.0.0.0', 4, 'multicast'),
  ipv4Range('240.0.0.0', 4, 'reserved'), // future use and 255.255.255.255 broadcast
];

const IPV6_RANGES: readonly Range[] = [
  ipv6Range('fd00:ec2::254', 128, 'metadata'), // AWS metadata over IPv6
  ipv6Range('::', 128, 'unspecified'),
  ipv6Range('::1', 128, 'loopback'),
  ipv6Range('::', 96, 'reserved'), // IPv4-compatible (deprecated)
  ipv6Range('64:ff9b:1::', 48, 'reserved'), // local-use NAT64
  ipv6Range('100::', 64, 'reserved'), // discard-only
  ipv6Range('2001:db8::', 32, 'reserved'), // documentation
  ipv6Range('2001::', 23, 'reserved'), // IETF protocol assignments, Teredo (which hides an IPv4 address)
  ipv6Range('fc00::', 7, 'private'), // unique local
  ipv6Range('fe80::', 10, 'link-local'),
  ipv6Range('fec0::', 10, 'reserved'), // deprecated site-local
  ipv6Range('ff00::', 8, 'multicast'),
];

/** IPv6 prefixes that carry an IPv4 address: the embedded address is what the packets reach. */
const IPV4_MAPPED = ipv6Range('::ffff:0:0', 96, 'reserved');
const NAT64 = ipv6Range('64:ff9b::', 96, 'reserved');
const SIX_TO_FOUR = ipv6Range('2002::', 16, 'reserved');

function parseIPv4(text: string): bigint | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  let value = 0n;
  for (const part of parts) {
    if (!/^\d{1,3}$/.test(part)) return undefined;
    const octet = Number(part);
    if (octet > 255) return undefined;
    value = (value << 8n) | BigInt(octet);
  }
  return value;
}

function parseIPv6(text: string): bigint | undefined {
  let body = text;
  // A trailing dotted IPv4 (::ffff:1.2.3.4) stands for the last two groups.
  let tail: number[] = [];
  if (body.includes('.')) {
    const lastColon = body.lastIndexOf(':');
    if (lastColon < 0) return undefined;
    const ipv4 = parseIPv4(body.slice(lastColon + 1));
    if (ipv4 === undefined) return undefined;
    tail = [Number(ipv4 >> 16n), Number(ipv4 & 0xffffn)];
    body = body.slice(0, lastColon + 1);
    if (!body.endsWith('::')) body = body.slice(0, -1);
  }
  const halves = body.split('::');
  if (halves.length > 2) return undefined;
  const split = (half: string) => (half === '' ? [] : half.split(':'));
  const wanted = 8 - tail.length;
  let groups: string[];
  if (halves.length === 2) {
    const head = split(halves[0] ?? '');
    const back = split(halves[1] ?? '');
    const missing = wanted - head.length - back.length;
    // `::` stands for at least one group of zeros.
    if (missing < 1) return undefined;
    groups = [...head, ...Array<string>(missing).fill('0'), ...back];
  } else {
    groups = split(body);
  }
  if (groups.length !== wanted) return undefined;
  let value = 0n;
  for (const group of groups) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(group)) return undefined;
    value = (value << 16n) | BigInt(parseInt(group, 16));
  }
  for (const group of tail) value = (value << 16n) | BigInt(group);
  return value;
}

function inRange(value: bigint, range: Range, width: number): boolean {
  const shift = BigInt(width - range.prefixLength);
  return value >> shift === range.network >> shift;
}

function firstMatch(value: bigint, ranges: readonly Range[], width: number): RefusalReason | undefined {
  for (const range of ranges) if (inRange(value, range, width)) return range.reason;
  return undefined;
}

function verdict(reason: RefusalReason | undefined, options: AddressPolicyOptions): AddressVerdict {
  if (reason === undefined) return { allowed: true };
  if (reason === 'loopback' && options.allowLoopback === true) return { allowed: true };
  return { allowed: false, reason };
}

function checkIPv4(value: bigint, options: AddressPolicyOptions): AddressVerdict {
  return verdict(firstMatch(value, IPV4_RANGES, 32), options);
}

/**
 * The verdict on one IP address (v4 or v6 text, as DNS or a URL gives it; brackets and a zone id
 * are not accepted — a zone only makes sense for link-local addresses, which are refused anyway).
 */
export function checkAddress(address: string, options: AddressPolicyOptions = {}): AddressVerdict {
  const family = isIP(address);
  if (family === 4) {
    const value = parseIPv4(address);
    return value === undefined ? { allowed: false, reason: 'malformed' } : checkIPv4(value, options);
  }
  if (family !== 6) return { allowed: false, reason: 'malformed' };
  const value = parseIPv6(address);
  if (value === undefined) return { allowed: false, reason: 'malformed' };
  if (inRange(value, IPV4_MAPPED, 128) || inRange(value, NAT64, 128)) return checkIPv4(value & 0xffffffffn, options);
  if (inRange(value, SIX_TO_FOUR, 128)) return checkIPv4((value >> 80n) & 0xffffffffn, options);
  return verdict(firstMatch(value, IPV6_RANGES, 128), options);
}

/** `[::1]` (URL host form) -> `::1`; other hosts unchanged. */
export function unbracketHost(hostname: string): string {
  return hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
}
