const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz'

export type IdPrefix = 'acc' | 'usr' | 'key' | 'req'

/**
 * A prefixed, lexicographically time-ordered id (ULID layout: 48-bit milliseconds, 80 random
 * bits, Crockford base32). Time order lets lists paginate by id without a second sort column.
 */
export function newId(prefix: IdPrefix, now: number = Date.now()): string {
  const random = crypto.getRandomValues(new Uint8Array(10))
  let out = ''
  let time = now
  for (let i = 0; i < 10; i++) {
    out = CROCKFORD[time % 32] + out
    time = Math.floor(time / 32)
  }
  let bits = 0
  let value = 0
  for (const byte of random) {
    value = (value << 8) | byte
    bits += 8
    while (bits >= 5) {
      out += CROCKFORD[(value >>> (bits - 5)) & 31]
      bits -= 5
    }
  }
  return `${prefix}_${out}`
}

const ID_BODY = /^[0-9a-hjkmnp-tv-z]{26}$/

export function isId(prefix: IdPrefix, value: string): boolean {
  return value.startsWith(`${prefix}_`) && ID_BODY.test(value.slice(prefix.length + 1))
}
