import { describe, expect, test } from 'bun:test'
import { addressForLimits, clientAddress, parseTrustedProxies, trustedProxies } from '../../../src/lib/http/client-address.ts'

const behind = (cidrs: string) => trustedProxies(parseTrustedProxies(cidrs))

describe('clientAddress', () => {
  test('without trusted proxies it is the socket address, whatever X-Forwarded-For says', () => {
    expect(clientAddress('198.51.100.7', '203.0.113.9', trustedProxies([]))).toBe('198.51.100.7')
    expect(clientAddress('198.51.100.7', null, trustedProxies([]))).toBe('198.51.100.7')
    expect(clientAddress(undefined, '203.0.113.9', trustedProxies([]))).toBe('unknown')
  })

  test('a peer that is not a trusted proxy is the client, whatever it forwards', () => {
    expect(clientAddress('198.51.100.7', '203.0.113.9', behind('10.0.0.0/8'))).toBe('198.51.100.7')
  })

  test('behind a trusted proxy, the address it appended is the client', () => {
    expect(clientAddress('10.0.0.2', '203.0.113.9', behind('10.0.0.0/8'))).toBe('203.0.113.9')
    expect(clientAddress('10.0.0.2', ' 203.0.113.9 ', behind('10.0.0.0/8'))).toBe('203.0.113.9')
  })

  test('several hops: the first untrusted one from the right; what the client wrote on the left is ignored', () => {
    const proxies = behind('10.0.0.0/8, 192.0.2.1')
    expect(clientAddress('10.0.0.2', '6.6.6.6, 203.0.113.9, 192.0.2.1, 10.1.2.3', proxies)).toBe('203.0.113.9')
    // Two header lines are one list (RFC 9110 §5.3), in order.
    expect(clientAddress('10.0.0.2', '6.6.6.6, 203.0.113.9, 10.1.2.3', proxies)).toBe('203.0.113.9')
  })

  test('every hop trusted: the farthest one', () => {
    expect(clientAddress('10.0.0.2', '10.0.0.4, 10.0.0.3', behind('10.0.0.0/8'))).toBe('10.0.0.4')
  })

  test('no header, an empty one, or junk where an address should be: the last trusted hop, never the junk', () => {
    const proxies = behind('10.0.0.0/8')
    expect(clientAddress('10.0.0.2', null, proxies)).toBe('10.0.0.2')
    expect(clientAddress('10.0.0.2', '', proxies)).toBe('10.0.0.2')
    expect(clientAddress('10.0.0.2', 'unknown', proxies)).toBe('10.0.0.2')
    expect(clientAddress('10.0.0.2', '203.0.113.9, junk', proxies)).toBe('10.0.0.2')
    // Empty list elements are no entries at all (RFC 9110 §5.6.1).
    expect(clientAddress('10.0.0.2', '203.0.113.9, , 10.0.0.3, ', proxies)).toBe('203.0.113.9')
    expect(clientAddress('10.0.0.2', '2130706433', proxies)).toBe('10.0.0.2')
    expect(clientAddress('10.0.0.2', '127.1', proxies)).toBe('10.0.0.2')
    expect(clientAddress('10.0.0.2', '1.2.3.4.5', proxies)).toBe('10.0.0.2')
    expect(clientAddress('10.0.0.2', 'x'.repeat(10_000), proxies)).toBe('10.0.0.2')
    // Junk left of the client is the client's own business.
    expect(clientAddress('10.0.0.2', 'junk, <script>, 203.0.113.9', proxies)).toBe('203.0.113.9')
  })

  test('ports, brackets, IPv6 and IPv4-mapped forms are read as the address they carry', () => {
    const proxies = behind('10.0.0.0/8, 2001:db8:ffff::/48')
    expect(clientAddress('10.0.0.2', '203.0.113.9:4711', proxies)).toBe('203.0.113.9')
    expect(clientAddress('10.0.0.2', '[2001:DB8:0:0::1]:443', proxies)).toBe('2001:db8::1')
    expect(clientAddress('10.0.0.2', '[2001:db8::1]', proxies)).toBe('2001:db8::1')
    expect(clientAddress('10.0.0.2', '::ffff:203.0.113.9', proxies)).toBe('203.0.113.9')
    expect(clientAddress('::ffff:10.0.0.2', '203.0.113.9', proxies)).toBe('203.0.113.9')
    expect(clientAddress('2001:db8:ffff::5', '203.0.113.9, 2001:db8:ffff::6', proxies)).toBe('203.0.113.9')
    expect(clientAddress('::ffff:198.51.100.7', '203.0.113.9', proxies)).toBe('198.51.100.7')
  })
})

describe('parseTrustedProxies', () => {
  test('CIDRs and single addresses, normalised; empty entries skipped', () => {
    expect(parseTrustedProxies('10.0.0.0/8, 2001:DB8::/32,,192.0.2.7 , ::ffff:172.16.0.0/108, ')).toEqual([
      '10.0.0.0/8',
      '2001:db8::/32',
      '192.0.2.7/32',
      '172.16.0.0/12',
    ])
    expect(parseTrustedProxies('')).toEqual([])
  })

  const bad = ['ten', '10.0.0.0/33', '10.0.0.0/-1', '10.0.0.0/', '10.1.2.3/8', '2001:db8::1/32', '0.0.0.0/0', '::/0', '10.0.0.0/8;10.1.0.0/16', '127.1', '10.0.0.0/8/8']
  for (const value of bad) {
    test(`${JSON.stringify(value)} is refused, naming the entry`, () => {
      expect(() => parseTrustedProxies(value)).toThrow(JSON.stringify(value.split(',')[0]!.trim()))
    })
  }
})

test('for limits, an IPv6 address counts as its /64 (one subscriber holds a whole /64); IPv4 as itself', () => {
  expect(addressForLimits('203.0.113.9')).toBe('203.0.113.9')
  expect(addressForLimits('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64')
  expect(addressForLimits('2001:db8:1:2:bbbb::2')).toBe('2001:db8:1:2::/64')
  expect(addressForLimits('unknown')).toBe('unknown')
})
