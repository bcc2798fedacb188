// Times Hugging Face's Rust `tokenizers` (npm tokenizers@0.23.2) on a JSONL corpus of {"text": ...}.
//   node tests/tokdiff/bench.mjs TOKENIZER_JSON CORPUS.jsonl [MIN_SECONDS]
// Only the encode calls are timed (node start-up, file reading, JSON parsing and the getIds()
// conversion to JS arrays are not):
//   single: await tok.encode(text, null, {addSpecialTokens: false}) per string, one after another;
//   batch:  await tok.encodeBatch(texts, {addSpecialTokens: false}), all strings in one call
//           (Rust runs a batch on its rayon pool: set RAYON_NUM_THREADS=1 for one thread).
//   decode_single: await tok.decode(ids, false) per string, on the ids encode gave;
//   decode_batch:  await tok.decodeBatch(all ids, false).
// Each mode runs once to warm up, then repeats until MIN_SECONDS (default 1) of timed work.
// Decode's mb_per_s counts the corpus's bytes (what decoding gives back, up to NFC).
// Prints one JSON line: {"strings", "bytes", "tokens", "single", "batch", "decode_single", "decode_batch"}.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'

const require = createRequire(import.meta.url)
const { Tokenizer } = require('tokenizers')

if (process.argv.length < 4) {
  process.stderr.write('usage: node bench.mjs TOKENIZER_JSON CORPUS.jsonl [MIN_SECONDS]\n')
  process.exit(2)
}
const tok = Tokenizer.fromFile(process.argv[2])
const texts = readFileSync(process.argv[3], 'utf8')
  .split('\n')
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l).text)
const minSeconds = Number(process.argv[4] ?? 1)
const bytes = texts.reduce((a, s) => a + Buffer.byteLength(s, 'utf8'), 0)
const opts = { addSpecialTokens: false }

// Each pass returns [seconds inside the encode calls, tokens]; getIds() runs outside the timed part.
async function single() {
  let n = 0
  let ns = 0n
  for (const s of texts) {
    const t = process.hrtime.bigint()
    const e = await tok.encode(s, null, opts)
    ns += process.hrtime.bigint() - t
    n += e.getIds().length
  }
  return [Number(ns) / 1e9, n]
}
async function batch() {
  const t = process.hrtime.bigint()
  const encs = await tok.encodeBatch(texts, opts)
  const sec = Number(process.hrtime.bigint() - t) / 1e9
  let n = 0
  for (const e of encs) n += e.getIds().length
  return [sec, n]
}
const ids = []
for (const s of texts) ids.push((await tok.encode(s, null, opts)).getIds())
async function decodeSingle() {
  let n = 0
  let ns = 0n
  for (const x of ids) {
    const t = process.hrtime.bigint()
    await tok.decode(x, false)
    ns += process.hrtime.bigint() - t
    n += x.length
  }
  return [Number(ns) / 1e9, n]
}
async function decodeBatch() {
  const t = process.hrtime.bigint()
  await tok.decodeBatch(ids, false)
  const sec = Number(process.hrtime.bigint() - t) / 1e9
  return [sec, ids.reduce((a, x) => a + x.length, 0)]
}
async function time(fn) {
  const [, tokens] = await fn() // warm-up
  let reps = 0
  let sec = 0
  do {
    sec += (await fn())[0]
    reps++
  } while (sec < minSeconds)
  const per = sec / reps
  return { tokens, reps, seconds_per_pass: per, mb_per_s: bytes / 1e6 / per, tokens_per_s: tokens / per }
}
const s = await time(single)
const b = await time(batch)
const ds = await time(decodeSingle)
const db = await time(decodeBatch)
console.log(JSON.stringify({
  strings: texts.length, bytes, tokens: s.tokens, rayon_threads: process.env.RAYON_NUM_THREADS ?? 'default',
  single: s, batch: b, decode_single: ds, decode_batch: db,
}))
