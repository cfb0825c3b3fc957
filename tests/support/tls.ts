import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/** A CA made for this run, and a certificate it signs for `localhost` and 127.0.0.1. */
export function makeCertificates(dir: string) {
  const openssl = (...args: string[]) => {
    const result = Bun.spawnSync(['openssl', ...args], { cwd: dir, stderr: 'pipe' })
    if (result.exitCode !== 0) throw new Error(`openssl ${args[0]} failed: ${result.stderr.toString()}`)
  }
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
  openssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=Webhook test CA', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign')
  openssl('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost')
  writeFileSync(join(dir, 'server.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n')
  openssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '1', '-extfile', 'server.ext')
  const read = (name: string) => readFileSync(join(dir, name), 'utf8')
  return { ca: read('ca.pem'), key: read('server.key'), cert: read('server.pem') }
}

