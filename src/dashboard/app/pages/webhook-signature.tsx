import { CopyButton, Time } from '../components.tsx'
import { settings } from '../settings.ts'
import type { Hook } from '../types.ts'

/** The scheme in words, for the facts list (docs/webhooks.md#signatures). */
export function signatureName(scheme: Hook['signature']): string {
  return scheme === 'ed25519' ? 'Ed25519 (v1a): you verify with the public key' : 'HMAC-SHA256 (v1): you verify with the shared secret'
}

/** A public key under its label, with a copy button that names it. */
export function PublicKey({ id, label, value }: { id: string; label: string; value: string }) {
  return (
    <p>
      <strong>{label}</strong>
      <br />
      <code class="secret-value" id={id}>
        {value}
      </code>{' '}
      <CopyButton text={value} label={`Copy ${label.toLowerCase()}`} />
    </p>
  )
}

/**
 * How the owner's server checks a delivery, for the scheme the subscription uses: an ed25519
 * subscription's public keys (the current one, and during a rotation's 24 h the one it replaced),
 * or where an hmac subscription's secret comes from.
 */
export function SignatureSection({ hook }: { hook: Hook }) {
  return (
    <section class="card" aria-labelledby="signature-title">
      <h2 id="signature-title">Signature</h2>
      {hook.signature === 'ed25519' && hook.public_key ? (
        <>
          <PublicKey id="public-key" label="Public key" value={hook.public_key} />
          {hook.previous_public_key && hook.previous_public_key_expires_at && (
            <>
              <PublicKey id="previous-public-key" label="Previous public key" value={hook.previous_public_key} />
              <p class="hint">
                The previous key also signs each delivery until <Time iso={hook.previous_public_key_expires_at} />: accept a delivery when either signature verifies.
              </p>
            </>
          )}
          <p>
            Each delivery's <code>webhook-signature</code> header holds <code>v1a,</code> and the base64 Ed25519 signature of{' '}
            <code>webhook-id.webhook-timestamp.body</code> (the raw body, before parsing it). Check it with this public key: the part after{' '}
            <code>whpk_</code> is the base64 of the 32-byte key, which Web Crypto imports as a <code>raw</code> Ed25519 key. The key is public: it
            cannot sign, so it is safe in your server's configuration.
          </p>
        </>
      ) : (
        <p>
          Each delivery's <code>webhook-signature</code> header holds <code>v1,</code> and an HMAC-SHA256 of{' '}
          <code>webhook-id.webhook-timestamp.body</code> keyed with the signing secret shown when the webhook was created (or last rotated). Any
          Standard Webhooks library checks it.
        </p>
      )}
      <p class="hint">
        The headers are described in the <a href={`${settings.apiBase}/docs`}>API reference</a>; verifying them step by step is in{' '}
        <code>docs/webhooks.md</code> (Signatures) in the service's repository.
      </p>
    </section>
  )
}
