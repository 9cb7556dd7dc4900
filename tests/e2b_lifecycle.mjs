// A sandbox's life as E2B's JS SDK (the official `e2b` package from npm, in the directory
// WAXELL_E2B_PEER_JS names, with node_modules) sees it against `waxell-sandbox serve`: pause and
// resume three times keeping the files, auto-pause on timeout then connect, fork, a snapshot and
// sandboxes from it, metrics, and filtered lists read page by page.
//
//   E2B_API_URL=http://127.0.0.1:P E2B_SANDBOX_URL=http://127.0.0.1:P E2B_API_KEY=e2b_<hex> \
//       WAXELL_E2B_PEER_JS=<dir with node_modules> node tests/e2b_lifecycle.mjs [all|memory]
//
// `memory` (a server that keeps memory: gVisor on Docker Engine): a background command lives on
// across a pause and a fork. Prints one `ok` line per check and "all checks passed"; exits 1 on the
// first failure (2 if the SDK is missing). tests/tests/e2b_lifecycle.rs runs it.
import { randomUUID } from 'node:crypto'
import { peerPackage } from './e2b_peer.mjs'

const { Sandbox, CommandExitError } = peerPackage('e2b')

function check(name, condition, detail = '') {
  if (!condition) throw new Error(`${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`)
  console.log(`ok ${name}`)
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function waitFor(what, predicate, ms = 20000) {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await predicate()) return
    await sleep(200)
  }
  throw new Error(`timed out waiting for ${what}`)
}

async function state(id) {
  return (await Sandbox.getInfo(id)).state
}

async function pauseResumeCycles() {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    for (let cycle = 1; cycle <= 3; cycle++) {
      await sbx.files.write(`/home/user/cycle${cycle}.txt`, String(cycle))
      check(`cycle ${cycle}: paused`, await sbx.pause())
      check(`cycle ${cycle}: info says paused`, (await state(sbx.sandboxId)) === 'paused')
      await sbx.connect({ timeoutMs: 120_000 })
      check(`cycle ${cycle}: running after connect`, await sbx.isRunning())
      for (let earlier = 1; earlier <= cycle; earlier++) {
        const kept = await sbx.files.read(`/home/user/cycle${earlier}.txt`)
        check(`cycle ${cycle}: the file of cycle ${earlier} kept`, kept === String(earlier), kept)
      }
    }
  } finally {
    await sbx.kill()
  }
}

async function autoPauseThenConnect() {
  const sbx = await Sandbox.create({ timeoutMs: 3000, lifecycle: { onTimeout: 'pause' } })
  try {
    await sbx.files.write('/home/user/before.txt', 'kept')
    await waitFor('the auto-pause', async () => (await state(sbx.sandboxId)) === 'paused')
    check('the sandbox paused when its time was up', true)
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
    check('connect resumed it', (await again.getInfo()).state === 'running')
    check('with its files', (await again.files.read('/home/user/before.txt')) === 'kept')
  } finally {
    await sbx.kill()
  }
}

async function forkAndSnapshot() {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { purpose: 'fork-test' } })
  const made = []
  try {
    await sbx.files.write('/home/user/shared.txt', 'from the source')
    const forks = await sbx.fork({ count: 2, timeoutMs: 60_000 })
    check('two forks', forks.length === 2 && forks.every((f) => f instanceof Sandbox), String(forks))
    made.push(...forks)
    for (const [i, fork] of forks.entries()) {
      check(`fork ${i} has the source's files`, (await fork.files.read('/home/user/shared.txt')) === 'from the source')
      check(`fork ${i} is a sandbox of its own`, fork.sandboxId !== sbx.sandboxId)
    }
    await forks[0].files.write('/home/user/shared.txt', 'changed in fork 0')
    check('each fork is its own', (await forks[1].files.read('/home/user/shared.txt')) === 'from the source')

    const snapshot = await sbx.createSnapshot({ name: `js-${randomUUID().slice(0, 8)}` })
    check('a snapshot', typeof snapshot.snapshotId === 'string' && snapshot.snapshotId.length > 0, snapshot)
    await sbx.files.write('/home/user/shared.txt', 'changed after the snapshot')
    const child = await Sandbox.create(snapshot.snapshotId, { timeoutMs: 60_000 })
    made.push(child)
    check('a sandbox from the snapshot has its files', (await child.files.read('/home/user/shared.txt')) === 'from the source')
    const listed = []
    const snapshots = Sandbox.listSnapshots()
    while (snapshots.hasNext) listed.push(...(await snapshots.nextItems()))
    check('the snapshot is listed', listed.some((s) => s.snapshotId === snapshot.snapshotId), listed)
    check('the snapshot deleted', await Sandbox.deleteSnapshot(snapshot.snapshotId))
  } finally {
    for (const other of made) await other.kill()
    await sbx.kill()
  }
}

async function metrics() {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  try {
    await sbx.commands.run('head -c 1000000 /dev/urandom > /home/user/blob')
    let samples = []
    await waitFor('a metrics sample', async () => (samples = await sbx.getMetrics()).length > 0)
    const sample = samples[samples.length - 1]
    check('metrics: CPU count and use', sample.cpuCount >= 1 && sample.cpuUsedPct >= 0, sample)
    check('metrics: memory used within the total', sample.memUsed > 0 && sample.memUsed <= sample.memTotal, sample)
    check('metrics: disk used within the total', sample.diskUsed > 0 && sample.diskUsed <= sample.diskTotal, sample)
  } finally {
    await sbx.kill()
  }
}

async function lists() {
  const run = randomUUID()
  const made = []
  try {
    for (let i = 0; i < 3; i++) made.push(await Sandbox.create({ timeoutMs: 60_000, metadata: { run, i: String(i) } }))
    await made[0].pause()
    const seen = []
    const pages = Sandbox.list({ query: { metadata: { run } }, limit: 2 })
    let count = 0
    while (pages.hasNext) {
      const page = await pages.nextItems()
      count++
      check(`page ${count} holds at most 2`, page.length <= 2, page.length)
      seen.push(...page)
    }
    check('the metadata filter and pages give all three, once each',
      seen.length === 3 && new Set(seen.map((s) => s.sandboxId)).size === 3, seen.map((s) => s.sandboxId))
    check('in two pages', count === 2, count)
    const paused = []
    const pausedPages = Sandbox.list({ query: { metadata: { run }, state: ['paused'] } })
    while (pausedPages.hasNext) paused.push(...(await pausedPages.nextItems()))
    check('the state filter gives the paused one', paused.length === 1 && paused[0].sandboxId === made[0].sandboxId,
      paused.map((s) => s.sandboxId))
  } finally {
    for (const sbx of made) await sbx.kill()
  }
}

async function memory() {
  const sbx = await Sandbox.create({ timeoutMs: 180_000 })
  const made = []
  try {
    const counter = await sbx.commands.run(
      'i=0; while true; do echo $i > /home/user/count.txt; i=$((i+1)); sleep 0.1; done',
      { background: true },
    )
    const waiting = await sbx.commands.run('read line; echo got $line; exit 4', { background: true, stdin: true })
    const count = async (box) => Number((await box.files.read('/home/user/count.txt')).trim() || 0)
    await waitFor('the first count', async () => (await count(sbx)) > 0)
    check('paused with memory', await sbx.pause())
    await sbx.connect({ timeoutMs: 180_000 })
    const pids = (await sbx.commands.list()).map((p) => p.pid).sort()
    check('after the resume both commands run, under their pids', JSON.stringify(pids) === JSON.stringify([counter.pid, waiting.pid].sort()), pids)
    const before = await count(sbx)
    await waitFor('the counter counting on', async () => (await count(sbx)) > before)
    const [fork] = await sbx.fork({ count: 1, timeoutMs: 60_000 })
    check('a fork', fork instanceof Sandbox, String(fork))
    made.push(fork)
    check('the fork has both commands', (await fork.commands.list()).length === 2)
    await fork.commands.sendStdin(waiting.pid, 'from the fork\n')
    const forked = await fork.commands.connect(waiting.pid)
    const ended = await forked.wait().catch((e) => e)
    check('the fork\'s copy reads its input and exits', ended instanceof CommandExitError && ended.exitCode === 4 &&
      ended.stdout === 'got from the fork\n', { exitCode: ended.exitCode, stdout: ended.stdout })
    await sbx.commands.sendStdin(waiting.pid, 'from the source\n')
    const own = await waiting.wait().catch((e) => e)
    check('the source\'s, through the handle of before the pause, reads its own', own instanceof CommandExitError &&
      own.stdout === 'got from the source\n', { exitCode: own.exitCode, stdout: own.stdout })
    await counter.kill()
  } finally {
    for (const other of made) await other.kill()
    await sbx.kill()
  }
}

const mode = process.argv[2] ?? 'all'
try {
  if (mode === 'memory') {
    await memory()
  } else {
    await pauseResumeCycles()
    await autoPauseThenConnect()
    await forkAndSnapshot()
    await metrics()
    await lists()
  }
  console.log('all checks passed')
} catch (e) {
  console.error(e)
  process.exit(1)
}
