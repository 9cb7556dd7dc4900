// The code interpreter's kernel as E2B's JS SDK sees it (the official `@e2b/code-interpreter`, installed by
// scripts/setup-e2b-peer.sh) against `waxell-sandbox serve`, configured by environment as the Python
// scripts are:
//
//   E2B_API_URL=http://127.0.0.1:P E2B_SANDBOX_URL=http://127.0.0.1:P E2B_API_KEY=e2b_<hex> \
//       WAXELL_E2B_PEER_JS=<dir with node_modules> node tests/e2b_kernel.mjs
//
// Prints one `ok` / `FAIL` line per check; exits 1 if any failed (2 if the SDK is missing).
// tests/tests/e2b_kernel.rs runs it against an in-process server.
import { peerPackage } from './e2b_peer.mjs'

const { Sandbox } = peerPackage('@e2b/code-interpreter')

const failures = []
function check(name, condition, detail) {
  if (condition) console.log(`ok   - ${name}`)
  else {
    console.log(`FAIL - ${name}: ${JSON.stringify(detail)}`)
    failures.push(name)
  }
}

const sbx = await Sandbox.create({ timeoutMs: 300_000, envs: { SANDBOX_VAR: 'from-create' } })
try {
  const seen = []
  let run = await sbx.runCode("print('hello')", { onStdout: (m) => seen.push(m) })
  check('a print is one stdout message', run.logs.stdout.length === 1 && run.logs.stdout[0] === 'hello\n' && seen.length === 1, run.logs)

  run = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
  check('a DataFrame carries its columns as data', JSON.stringify(run.results[0]?.data) === '{"a":[1,2]}', run.results)

  run = await sbx.runCode('import matplotlib.pyplot as plt\nplt.scatter([1, 2], [3, 4])\nplt.show()')
  check('a figure comes with its chart', run.results[0]?.chart?.type === 'scatter' && !!run.results[0]?.png, run.results[0]?.chart)

  run = await sbx.runCode("console.log('from node'); await Promise.resolve(process.env.SANDBOX_VAR)", { language: 'js' })
  check('JavaScript with top-level await and the sandbox env', run.text === 'from-create' && run.logs.stdout[0] === 'from node\n', run)

  run = await sbx.runCode('const label: string = `t${1 + 1}`\nlabel', { language: 'ts' })
  check('TypeScript', run.text === 't2', run)

  await sbx.runCode('cd /tmp; export KEPT=1', { language: 'bash' })
  run = await sbx.runCode('echo "$(pwd) $KEPT"', { language: 'bash' })
  check('bash keeps its cwd and exports', run.logs.stdout.join('') === '/tmp 1\n', run.logs)

  const context = await sbx.createCodeContext({ language: 'js', cwd: '/root' })
  const listed = await sbx.listCodeContexts()
  check('contexts are listed default first, the new one last', listed[0].id === 'default' && listed.at(-1).id === context.id, listed)
  run = await sbx.runCode('process.cwd()', { context })
  check('a JavaScript context in /root', run.text === '/root', run)

  let refused
  try {
    await sbx.runCode('1', { language: 'r' })
  } catch (e) {
    refused = e
  }
  const rAvailable = refused === undefined
  // The JS SDK keeps only the status of a refusal (the Python script checks the message).
  check('R runs, or is refused as a bad request', rAvailable || /^SandboxError: 400/.test(String(refused)), String(refused))
} finally {
  await sbx.kill()
}

const victim = await Sandbox.create({ timeoutMs: 60_000 })
const running = victim.runCode('import time; time.sleep(60)', { timeoutMs: 90_000 })
setTimeout(() => victim.kill(), 1000)
try {
  await running
  check('a kill mid-run is an error', false, 'the run ended normally')
} catch (e) {
  check('a kill mid-run is an error', /killed while the request was in progress/.test(String(e)), String(e))
}

if (failures.length) {
  console.log(`${failures.length} check(s) failed: ${failures.join(', ')}`)
  process.exit(1)
}
console.log('all checks passed')
