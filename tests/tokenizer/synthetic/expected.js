// tests/tokenizer/synthetic/expected.js — expected.jsonl from Hugging Face
// tokenizers (npm `tokenizers`, installed in tests/bench/tokenizer): for each
// synthetic tokenizer and text, ids without/with special tokens and the decode
// of the ids (skip_special false and true). Run after gen_synthetic.py:
//   NODE_PATH=../../bench/tokenizer/node_modules node expected.js > expected.jsonl
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

async function main() {
  const texts = JSON.parse(fs.readFileSync(path.join(__dirname, 'texts.json'), 'utf8'));
  for (const name of ['bytelevel', 'metaspace', 'splits']) {
    const tok = Tokenizer.fromFile(path.join(__dirname, name + '.json'));
    for (const text of texts) {
      const a = await tok.encode(text, null, { addSpecialTokens: false });
      const b = await tok.encode(text, null, { addSpecialTokens: true });
      const ids = Array.from(a.getIds());
      const idsS = Array.from(b.getIds());
      const dec = await tok.decode(idsS, false);
      const decSkip = await tok.decode(idsS, true);
      console.log(JSON.stringify({ tokenizer: name, text, ids, ids_with_special: idsS, decoded: dec, decoded_skip: decSkip }));
    }
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
