// Commands and terminals as E2B's JS SDK (the official `e2b` package from npm, in the directory
// WAXELL_E2B_PEER_JS names, with node_modules) sees them against `waxell-sandbox serve`:
//
//   E2B_API_URL=http://127.0.0.1:P E2B_SANDBOX_URL=http://127.0.0.1:P E2B_API_KEY=e2b_<hex> \
//       WAXELL_E2B_PEER_JS=<dir with node_modules> node tests/e2b_commands.mjs
//
// Prints one `ok` line per check and "all checks passed"; exits 1 on the first failure (2 if the SDK
// is missing). tests/tests/e2b_commands.rs runs it against an in-process server.
import { peerPackage } from './e2b_peer.mjs'

const { Sandbox, CommandExitError } = peerPackage('e2b')

function check(name, condition, detail = '') {
  if (!condition) throw new Error(`${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`)
  console.log(`ok ${name}`)
}

async function exitError(run) {
  try {
    const result = await run()
    throw new Error(`expected CommandExitError, got ${JSON.stringify(result)}`)
  } catch (e) {
    if (e instanceof CommandExitError) return e
    throw e
  }
}

const sbx = await Sandbox.create({ timeoutMs: 300_000 })
try {
  const result = await sbx.commands.run('printf out; printf err >&2', { envs: { X: '1' } })
  check('foreground stdout/stderr/exit', result.stdout === 'out' && result.stderr === 'err' && result.exitCode === 0, result)

  const failed = await exitError(() => sbx.commands.run('echo partial; exit 9'))
  check('nonzero exit raises CommandExitError', failed.exitCode === 9 && failed.error === 'exit status 9' && failed.stdout === 'partial\n',
    { exitCode: failed.exitCode, error: failed.error })

  const cwd = await sbx.commands.run('echo "$WHO in $(pwd)"', { envs: { WHO: 'js' }, cwd: '/tmp' })
  check('env and cwd reach the command', cwd.stdout === 'js in /tmp\n', cwd.stdout)

  const cat = await sbx.commands.run('tr a-z A-Z', { background: true, stdin: true })
  await sbx.commands.sendStdin(cat.pid, 'from js')
  await sbx.commands.closeStdin(cat.pid)
  const shouted = await cat.wait()
  check('stdin reaches a background command and closing it ends it', shouted.stdout === 'FROM JS', shouted)

  const sleeper = await sbx.commands.run('sleep 30', { background: true })
  check('a background command is listed', (await sbx.commands.list()).some((p) => p.pid === sleeper.pid))
  const attached = await sbx.commands.connect(sleeper.pid)
  check('connect attaches to it', attached.pid === sleeper.pid)
  check('kill finds it', (await sbx.commands.kill(sleeper.pid)) === true)
  const killed = await exitError(() => attached.wait())
  check('a killed command ends with signal: killed', killed.exitCode === -1 && killed.error === 'signal: killed',
    { exitCode: killed.exitCode, error: killed.error })
  check('kill of an ended command is false', (await sbx.commands.kill(sleeper.pid)) === false)

  let output = ''
  const decoder = new TextDecoder()
  const terminal = await sbx.pty.create({ rows: 24, cols: 80, onData: (data) => { output += decoder.decode(data) } })
  await sbx.pty.sendInput(terminal.pid, new TextEncoder().encode('test -t 1 && echo IS_A_TTY; stty size\n'))
  const started = Date.now()
  while (!output.includes('24 80') && Date.now() - started < 20_000) await new Promise((r) => setTimeout(r, 50))
  await sbx.pty.resize(terminal.pid, { rows: 33, cols: 101 })
  await sbx.pty.sendInput(terminal.pid, new TextEncoder().encode('stty size; exit\n'))
  const ended = await terminal.wait()
  check('the terminal is a tty of the asked size', output.includes('IS_A_TTY') && output.includes('24 80'), output)
  check('a resize reaches it', output.includes('33 101'), output)
  check('exit ends the terminal', ended.exitCode === 0, ended)
} finally {
  await sbx.kill()
}
console.log('all checks passed')
