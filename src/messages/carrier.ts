/** Decides what becomes of an outbound message. Real carriers plug in here. */
export interface Carrier {
  name: string
  deliver(to: string, body: string): Promise<{ delivered: true } | { delivered: false; error: string }>
}

/** docs/api.md#the-sandbox-carrier: delivers to any number except those ending in 0000, which fail. */
export const sandboxCarrier: Carrier = {
  name: 'sandbox',
  async deliver(to) {
    return to.endsWith('0000') ? { delivered: false, error: 'The sandbox carrier fails recipients ending in 0000.' } : { delivered: true }
  },
}
