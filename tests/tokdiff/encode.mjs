// Encodes JSONL {"text": ...} lines with Hugging Face's Rust `tokenizers` (npm tokenizers@0.23.2,
// N-API addon) and writes one {"ids": [...]} line per input, in order.
//   node tests/tokdiff/encode.mjs TOKENIZER_JSON [INPUT.jsonl]   (stdin when no input file)
// Calls exactly as the references in ../shared/models/qwen-tokenizer were made:
// Tokenizer.fromFile(path), await tok.encode(text, null, {addSpecialTokens: false}).getIds().
import { createRequire } from 'node:module'
import { readFileSync, writeSync } from 'node:fs'

const require = createRequire(import.meta.url)
const { Tokenizer } = require('tokenizers')

if (process.argv.length < 3 || process.argv.length > 4) {
  process.stderr.write('usage: node encode.mjs TOKENIZER_JSON [INPUT.jsonl]\n')
  process.exit(2)
}
const tok = Tokenizer.fromFile(process.argv[2])
const input = readFileSync(process.argv.length === 4 ? process.argv[3] : 0, 'utf8')
const lines = input.split('\n').filter((l) => l.length > 0)
const out = []
for (const line of lines) {
  const enc = await tok.encode(JSON.parse(line).text, null, { addSpecialTokens: false })
  out.push(JSON.stringify({ ids: enc.getIds() }))
}
const buf = Buffer.from(out.length ? out.join('\n') + '\n' : '', 'utf8')
for (let off = 0; off < buf.length; ) off += writeSync(1, buf, off, buf.length - off)
