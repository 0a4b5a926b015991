import { describe, expect, it } from 'vitest';
import { checkAddress, type RefusalReason } from './address-policy.js';

const refusedCases: Array<[string, RefusalReason]> = [
  ['127.0.0.1', 'loopback'],
  ['127.255.0.9', 'loopback'],
  ['::1', 'loopback'],
  ['10.0.0.1', 'private'],
  ['10.255.255.255', 'private'],
  ['172.16.0.1', 'private'],
  ['172.31.255.254', 'private'],
  ['192.168.1.10', 'private'],
  ['100.64.0.1', 'private'],
  ['fc00::1', 'private'],
  ['fd12:3456::1', 'private'],
  ['169.254.0.1', 'link-local'],
  ['fe80::1', 'link-local'],
  ['febf:ffff::1', 'link-local'],
  ['169.254.169.254', 'metadata'],
  ['fd00:ec2::254', 'metadata'],
  ['100.100.100.200', 'metadata'],
  ['0.0.0.0', 'unspecified'],
  ['0.1.2.3', 'unspecified'],
  ['::', 'unspecified'],
  ['224.0.0.1', 'multicast'],
  ['239.255.255.250', 'multicast'],
  ['ff02::1', 'multicast'],
  ['255.255.255.255', 'reserved'],
  ['240.0.0.1', 'reserved'],
  ['192.0.2.1', 'reserved'],
  ['2001:db8::1', 'reserved'],
  // IPv4 hidden in IPv6: the embedded address decides.
  ['::ffff:127.0.0.1', 'loopback'],
  ['::ffff:7f00:1', 'loopback'],
  ['::ffff:169.254.169.254', 'metadata'],
  ['::ffff:10.1.2.3', 'private'],
  ['64:ff9b::a00:1', 'private'],
  ['2002:c0a8:0101::1', 'private'], // 6to4 of 192.168.1.1
  ['::127.0.0.1', 'reserved'], // IPv4-compatible, deprecated
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'reserved'], // Teredo
  // Not addresses at all.
  ['localhost', 'malformed'],
  ['1.2.3', 'malformed'],
  ['', 'malformed'],
  ['fe80::1%eth0', 'malformed'],
];

describe('URL fetch address policy', () => {
  it.each(refusedCases)('refuses %s as %s', (address, reason) => {
    expect(checkAddress(address)).toEqual({ allowed: false, reason });
  });

  const publicAddresses = ['8.8.8.8', '1.1.1.1', '93.184.216.34', '172.32.0.1', '172.15.255.255', '192.169.0.1', '100.128.0.1', '169.255.0.1',
    '2606:4700:4700::1111', '2a00:1450:4001:80b::200e', '::ffff:8.8.8.8', '64:ff9b::808:808', '2002:0808:0808::1'];
  it.each(publicAddresses)('allows the public address %s', (address) => {
    expect(checkAddress(address)).toEqual({ allowed: true });
  });

  it('the test-only loopback switch lets loopback through and nothing else', () => {
    const options = { allowLoopback: true };
    expect(checkAddress('127.0.0.1', options)).toEqual({ allowed: true });
    expect(checkAddress('::1', options)).toEqual({ allowed: true });
    expect(checkAddress('::ffff:127.0.0.1', options)).toEqual({ allowed: true });
    for (const [address, reason] of refusedCases) {
      if (reason === 'loopback' || reason === 'malformed') continue;
      expect(checkAddress(address, options), address).toEqual({ allowed: false, reason });
    }
  });
});
