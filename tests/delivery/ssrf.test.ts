import { describe, expect, test } from 'bun:test'
import { TargetRefused, isForbiddenAddress, resolveTarget } from '../../src/lib/security/outbound.ts'

const resolvingTo =
  (...addresses: string[]) =>
  async () =>
    addresses
const refusal = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (error: unknown) => (error instanceof TargetRefused ? error.reason : error),
  )

describe('isForbiddenAddress', () => {
  const forbidden = [
    ['10.0.0.1', 'private'],
    ['172.16.0.1', 'private'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'CGNAT'],
    ['169.254.169.254', 'cloud metadata (link-local)'],
    ['168.63.129.16', 'Azure WireServer'],
    ['127.0.0.1', 'loopback'],
    ['0.0.0.0', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['192.0.2.1', 'documentation'],
    ['240.0.0.1', 'reserved'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['fe80::1', 'link-local'],
    ['fc00::1', 'unique-local'],
    ['fd00:ec2::254', 'AWS metadata (unique-local)'],
    ['ff02::1', 'multicast'],
    ['::ffff:127.0.0.1', 'IPv4-mapped loopback'],
    ['::ffff:7f00:1', 'IPv4-mapped loopback, hex form'],
    ['::ffff:169.254.169.254', 'IPv4-mapped metadata'],
    ['::7f00:1', 'IPv4-compatible (deprecated)'],
    ['64:ff9b::7f00:1', 'NAT64 of loopback'],
    ['64:ff9b::a00:1', 'NAT64 of 10.0.0.1'],
    ['64:ff9b:1::5db8:d822', 'local-use NAT64 prefix'],
    ['2002:7f00:1::1', '6to4'],
    ['2001::1', 'Teredo'],
    ['2001:db8::1', 'documentation'],
    ['not an address', 'unparseable'],
  ]
  test.each(forbidden)('%s is refused (%s)', (ip) => {
    expect(isForbiddenAddress(ip)).toBe(true)
  })

  const allowed = ['93.184.216.34', '8.8.8.8', '2606:2800:220:1:248:1893:25c8:1946', '::ffff:93.184.216.34', '64:ff9b::5db8:d822']
  test.each(allowed)('%s is allowed', (ip) => {
    expect(isForbiddenAddress(ip)).toBe(false)
  })
})

describe('resolveTarget', () => {
  const refused = { allowPrivate: false }

  test.each(['127.0.0.1', '10.0.0.1', '169.254.169.254', '[::1]', '[::ffff:127.0.0.1]', '[::ffff:7f00:1]', '0.0.0.0', '[::]', '[fe80::1]'])(
    'the literal https://%s/ is refused without a lookup',
    async (host) => {
      const lookup = () => Promise.reject(new Error('an address literal must not be looked up'))
      expect(await refusal(resolveTarget(new URL(`https://${host}/hook`), { ...refused, lookup }))).toBe('forbidden_address')
    },
  )

  test('URL spellings of loopback that WHATWG normalises are caught too', async () => {
    for (const host of ['2130706433', '0x7f.1', '127.1']) {
      expect(await refusal(resolveTarget(new URL(`https://${host}/`), refused))).toBe('forbidden_address')
    }
  })

  test('a name resolving to a private address is refused', async () => {
    expect(await refusal(resolveTarget(new URL('https://hooks.example.com/'), { ...refused, lookup: resolvingTo('127.0.0.1') }))).toBe('forbidden_address')
  })

  test('a real name resolving to loopback (localhost) is refused', async () => {
    expect(await refusal(resolveTarget(new URL('https://localhost/'), refused))).toBe('forbidden_address')
  })

  test('one private record among public ones refuses the whole name (rebinding)', async () => {
    const lookup = resolvingTo('93.184.216.34', '10.0.0.1')
    expect(await refusal(resolveTarget(new URL('https://hooks.example.com/'), { ...refused, lookup }))).toBe('forbidden_address')
  })

  test('public literals and names pass, with every checked address returned once', async () => {
    expect(await resolveTarget(new URL('https://93.184.216.34/'), refused)).toEqual({ hostname: '93.184.216.34', isAddressLiteral: true, addresses: ['93.184.216.34'] })
    expect(await resolveTarget(new URL('https://[2606:2800:220:1:248:1893:25c8:1946]:8443/'), refused)).toEqual({
      hostname: '2606:2800:220:1:248:1893:25c8:1946',
      isAddressLiteral: true,
      addresses: ['2606:2800:220:1:248:1893:25c8:1946'],
    })
    const lookup = resolvingTo('93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946', '93.184.216.34')
    expect(await resolveTarget(new URL('https://hooks.example.com/x'), { ...refused, lookup })).toEqual({
      hostname: 'hooks.example.com',
      isAddressLiteral: false,
      addresses: ['93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946'],
    })
  })

  test('plain http: refused as a scheme, except to loopback and private addresses when private targets are allowed (local development)', async () => {
    expect(await refusal(resolveTarget(new URL('http://127.0.0.1:8080/hook'), { allowPrivate: false }))).toBe('scheme')
    expect((await resolveTarget(new URL('http://127.0.0.1:8080/hook'), { allowPrivate: true })).addresses).toEqual(['127.0.0.1'])
    expect((await resolveTarget(new URL('http://receiver.internal/hook'), { allowPrivate: true, lookup: resolvingTo('10.1.2.3') })).addresses).toEqual(['10.1.2.3'])
    // A name that resolves, even partly, to a public address gets no plain http, whatever the setting.
    expect(await refusal(resolveTarget(new URL('http://receiver.example/hook'), { allowPrivate: true, lookup: resolvingTo('10.1.2.3', '93.184.216.34') }))).toBe('scheme')
  })

  test('http to a public address is refused as a scheme, credentials as userinfo, even when private targets are allowed', async () => {
    for (const allowPrivate of [false, true]) {
      expect(await refusal(resolveTarget(new URL('http://93.184.216.34/'), { allowPrivate }))).toBe('scheme')
      expect(await refusal(resolveTarget(new URL('https://user:pass@93.184.216.34/'), { allowPrivate }))).toBe('userinfo')
      expect(await refusal(resolveTarget(new URL('https://user@93.184.216.34/'), { allowPrivate }))).toBe('userinfo')
    }
  })

  test('a name that does not resolve is refused as unresolvable', async () => {
    const failing = () => Promise.reject(Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' }))
    expect(await refusal(resolveTarget(new URL('https://nowhere.example/'), { ...refused, lookup: failing }))).toBe('unresolvable')
    expect(await refusal(resolveTarget(new URL('https://nowhere.example/'), { ...refused, lookup: resolvingTo() }))).toBe('unresolvable')
  })

  test('allowPrivate lets loopback through, by literal and by name', async () => {
    expect((await resolveTarget(new URL('https://[::1]/'), { allowPrivate: true })).addresses).toEqual(['::1'])
    expect((await resolveTarget(new URL('https://localhost/'), { allowPrivate: true, lookup: resolvingTo('127.0.0.1') })).addresses).toEqual(['127.0.0.1'])
    expect((await resolveTarget(new URL('https://localhost/'), { allowPrivate: true })).addresses).toContain('127.0.0.1')
  })
})
