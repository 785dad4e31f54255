// tests/bench/tokenizer/bench_hf.js TOKENIZER_JSON CORPUS_JSONL SECONDS
// Hugging Face tokenizers (Rust, official Node binding from npm) on the corpus:
// encode each document (no special tokens added; special-token text parsed, as
// aorta's TOK_PARSE_SPECIAL), one at a time, on one thread. Prints MB/s, the
// token count and an FNV-1a hash of all ids (to check both sides agree).
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [tokPath, corpusPath, secsArg] = process.argv.slice(2);
  const secs = Number(secsArg || 3);
  const docs = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
  const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d, 'utf8'), 0);
  const tok = Tokenizer.fromFile(tokPath);
  let hash = 0x811c9dc5, ntok = 0;
  const pass = async (check) => {
    for (const d of docs) {
      const enc = await tok.encode(d, null, { addSpecialTokens: false });
      if (check) {
        const ids = enc.getIds();
        ntok += ids.length;
        for (const id of ids) { hash ^= id; hash = Math.imul(hash, 0x01000193) >>> 0; }
      }
    }
  };
  await pass(true); // warm-up, and the ids hash
  let passes = 0;
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage(); // all threads of the process (encode runs on a libuv worker)
  let el = 0;
  do {
    await pass(false);
    passes++;
    el = Number(process.hrtime.bigint() - t0) / 1e9;
  } while (el < secs);
  const cu = process.cpuUsage(c0);
  const cpuS = (cu.user + cu.system) / 1e6;
  const mbs = (bytes * passes) / el / 1e6;
  console.log(JSON.stringify({ impl: 'hf-tokenizers-node', mb_per_s: +mbs.toFixed(2),
    mb_per_cpu_s: +((bytes * passes) / cpuS / 1e6).toFixed(2), bytes, tokens: ntok,
    ids_fnv1a: hash.toString(16), passes, seconds: +el.toFixed(2), cpu_seconds: +cpuS.toFixed(2) }));
}
main().catch((e) => { console.error(e); process.exit(1); });
