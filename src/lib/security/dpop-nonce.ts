import { constantTimeEqual } from './crypto.ts'

/**
 * DPoP server nonces (RFC 9449 §8, §9), valid on every instance without a shared store: the
 * nonce of a time slot is an HMAC of the slot's number under a key derived from ENCRYPTION_KEY,
 * which every instance of a deployment already shares. A nonce is accepted during its slot and
 * the next one, so one a client just received stays good for at least a slot whatever the moment
 * it arrived (docs/oauth.md#dpop).
 */

/** Length of a slot: a nonce lives between 5 and 10 minutes. */
export const DPOP_NONCE_SLOT_SECONDS = 300

export interface DpopNonces {
  /** The nonce to hand out now (a `DPoP-Nonce` header). */
  current(): Promise<string>
  /** Whether `nonce` is the current slot's or the previous one's. */
  accepts(nonce: string): Promise<boolean>
}

// HKDF's `info`: the derived key serves nonces only, whatever else ENCRYPTION_KEY keys.
const DERIVATION_INFO = new TextEncoder().encode('dpop-nonce v1')

export async function createDpopNonces(secret: Uint8Array, now: () => number = Date.now): Promise<DpopNonces> {
  const base = await crypto.subtle.importKey('raw', secret as Uint8Array<ArrayBuffer>, 'HKDF', false, ['deriveKey'])
  const key = await crypto.subtle.deriveKey(
    { name: 'HKDF', hash: 'SHA-256', salt: new Uint8Array(0), info: DERIVATION_INFO },
    base,
    { name: 'HMAC', hash: 'SHA-256', length: 256 },
    false,
    ['sign'],
  )
  // Two slots are ever asked for; the map is emptied when a third would join them.
  const bySlot = new Map<number, Promise<string>>()
  const nonceOf = (slot: number): Promise<string> => {
    let nonce = bySlot.get(slot)
    if (!nonce) {
      if (bySlot.size >= 2) bySlot.clear()
      nonce = crypto.subtle.sign('HMAC', key, new TextEncoder().encode(`slot:${slot}`)).then((mac) => Buffer.from(mac).toString('base64url'))
      bySlot.set(slot, nonce)
    }
    return nonce
  }
  const slotNow = () => Math.floor(now() / 1000 / DPOP_NONCE_SLOT_SECONDS)
  return {
    current: () => nonceOf(slotNow()),
    async accepts(nonce) {
      const slot = slotNow()
      const [current, previous] = await Promise.all([nonceOf(slot), nonceOf(slot - 1)])
      // Both compared, so the time taken does not say which slot matched.
      const isCurrent = constantTimeEqual(nonce, current)
      const isPrevious = constantTimeEqual(nonce, previous)
      return isCurrent || isPrevious
    },
  }
}
