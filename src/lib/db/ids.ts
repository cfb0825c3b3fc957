import { createHash } from 'node:crypto'
const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz'

export type IdPrefix = 'acc' | 'usr' | 'key' | 'req' | 'cli' | 'grt' | 'hook' | 'evs' | 'msg' | 'evt' | 'dlv' | 'att' | 'idp' | 'sbj'

// Ids are made on every request (request ids): random bytes come from a pool, refilled in bulk.
const POOL_SIZE = 4096
const RANDOM_BYTES_PER_ID = 10
let pool = new Uint8Array(0)
let poolOffset = 0

function randomBytes(): Uint8Array {
  if (poolOffset + RANDOM_BYTES_PER_ID > pool.length) {
    pool = crypto.getRandomValues(new Uint8Array(POOL_SIZE))
    poolOffset = 0
  }
  const bytes = pool.subarray(poolOffset, poolOffset + RANDOM_BYTES_PER_ID)
  poolOffset += RANDOM_BYTES_PER_ID
  return bytes
}

/**
 * A prefixed, lexicographically time-ordered id (ULID layout: 48-bit milliseconds, 80 random
 * bits, Crockford base32). Time order lets lists paginate by id without a second sort column.
 */
// Monotonic within a process (as ULID's monotonic mode): ids made in the same millisecond
// increment the previous random part, so creation order is id order even within a millisecond.
let lastTime = -1
const lastRandom = new Uint8Array(RANDOM_BYTES_PER_ID)

function nextRandom(time: number): Uint8Array {
  if (time === lastTime) {
    for (let i = lastRandom.length - 1; i >= 0; i--) {
      lastRandom[i] = (lastRandom[i]! + 1) & 0xff
      if (lastRandom[i] !== 0) break
    }
  } else {
    lastTime = time
    lastRandom.set(randomBytes())
  }
  return lastRandom
}

/** The 10 characters of an id that encode its time. */
function timeCharacters(now: number): string {
  // 50 bits of time (10 characters) do not fit 32-bit integer operations: two 25-bit halves.
  const high = Math.floor(now / 2 ** 25)
  const low = now % 2 ** 25
  let out = ''
  for (let shift = 20; shift >= 0; shift -= 5) out += CROCKFORD[(high >>> shift) & 31]
  for (let shift = 20; shift >= 0; shift -= 5) out += CROCKFORD[(low >>> shift) & 31]
  return out
}

/** The lowest id that can be made at `time`: every id made earlier sorts below it, every id made at or after it does not. */
export function lowestIdAt(prefix: IdPrefix, time: number): string {
  return `${prefix}_${timeCharacters(time)}${'0'.repeat(16)}`
}

/** The first `length` characters of `bytes` in Crockford base32, five bits each, most significant first. */
function base32(bytes: Uint8Array, length: number): string {
  let out = ''
  let bits = 0
  let value = 0
  for (let i = 0; out.length < length; i++) {
    value = ((value << 8) | bytes[i]!) & 0xfff
    bits += 8
    while (bits >= 5 && out.length < length) {
      out += CROCKFORD[(value >>> (bits - 5)) & 31]
      bits -= 5
    }
  }
  return out
}

// 80 random bits: 16 characters after the 10 of the time.
const RANDOM_CHARACTERS = (RANDOM_BYTES_PER_ID * 8) / 5

export function newId(prefix: IdPrefix, now: number = Date.now()): string {
  return `${prefix}_${timeCharacters(now)}${base32(nextRandom(now), RANDOM_CHARACTERS)}`
}

/**
 * An id derived from `material` rather than drawn at random: the same material always gives the same
 * id (the first 130 bits of its SHA-256, Crockford base32), in the same alphabet and length as newId's.
 */
export function derivedId(prefix: IdPrefix, material: string): string {
  return `${prefix}_${base32(createHash('sha256').update(material).digest(), 26)}`
}

const ID_BODY = /^[0-9a-hjkmnp-tv-z]{26}$/

export function isId(prefix: IdPrefix, value: string): boolean {
  return value.startsWith(`${prefix}_`) && ID_BODY.test(value.slice(prefix.length + 1))
}
