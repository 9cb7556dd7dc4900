// E2B's JS SDKs for the tests' scripts: the packages in the directory WAXELL_E2B_PEER_JS names
// (with node_modules; scripts/setup-e2b-peer.sh installs them). A script exits 2 when one is missing.
import { createRequire } from 'node:module'
import path from 'node:path'

// The package `name` (`e2b`, `@e2b/code-interpreter`) from the peer directory.
export function peerPackage(name) {
  const peer = process.env.WAXELL_E2B_PEER_JS
  if (!peer) {
    console.error('WAXELL_E2B_PEER_JS is not set: run scripts/setup-e2b-peer.sh')
    process.exit(2)
  }
  try {
    return createRequire(path.join(peer, 'package.json'))(name)
  } catch (e) {
    console.error(`${name} is not installed in ${peer} (${e}): run scripts/setup-e2b-peer.sh`)
    process.exit(2)
  }
}
