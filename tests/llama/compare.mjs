// tests/llama/compare.mjs — aorta's engine vs llama.cpp (node-llama-cpp
// 3.21.1's prebuilt CPU library, a forward pass we did not write) on the same
// GGUF files: small random-weight models that `aorta make-model` writes, one
// per (arch, dtype) case below.
//
// For each case both sides run the same prompt (token ids) as one prefill,
// then greedy decoding one token at a time:
//   aorta:     aorta_logits MODEL N_GEN IDS...  (full logits of every position)
//   llama.cpp: LlamaContextSequence.controlledEvaluate with temperature 0,
//              next-token probabilities at every prompt position, then its own
//              greedy tokens fed back one by one (it never sees aorta's).
// Checked, at every position where both sides saw the same tokens:
//   - top-k log-probabilities (k = 10, the union of both sides' top-k) agree
//     within TOL[dtype] (derivation below);
//   - top-1 agrees unless the position is a near-tie: aorta's top-2 gap below
//     2*TOL (each log-prob may move by TOL, so the gap by 2*TOL);
//   - the greedy continuations are equal up to the first near-tie (after it
//     they may rightly differ; the rest is not compared).
// Prints per case the max |error|, the smallest top-2 gap seen and how far
// greedy agreed; exits 1 on any failure.
//
// Usage: node compare.mjs AORTA AORTA_LOGITS
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [aorta, aortaLogits] = process.argv.slice(2);
if (!aorta || !aortaLogits) {
	console.error("usage: node compare.mjs AORTA AORTA_LOGITS");
	process.exit(2);
}

// ---- tolerances ----------------------------------------------------------
// Both sides keep the KV cache in F32 and accumulate every dot product in F32;
// they differ in what they round before accumulating. Per matmul, as a
// relative error r (rms) of its output against exact arithmetic on the same
// weights:
//   f32  weights: nothing is rounded; only the summation order differs
//        (blocked SIMD sums, softmax/RMSNorm reductions): ~sqrt(n) * 2^-24
//        for a dot of n = 128..256 terms, r = 2^-20 (rounded up).
//   f16  weights: llama.cpp rounds each matmul's input activations to F16
//        (ggml's vec_dot_type for F16 is F16; aorta keeps them F32). A
//        relative rounding error of rms u/sqrt(3), u = 2^-11, on each input
//        of a random-sign dot gives the output the same relative rms:
//        r = 2^-11/sqrt(3) = 2.8e-4.
//   q8_0 weights: both quantize the activations to int8 per 32-block
//        (step amax/127, rounding error rms step/sqrt(12), amax ~2.5 rms for
//        32 normal values: 5.7e-3 of the input's rms). The codes are the
//        same (ggml's quantize_row_q8_0 and kcpu_quantize_act_q8_0 agree on
//        every code of 8840 blocks); the scales are not: llama.cpp stores
//        the block scale as F16, aorta keeps it in F32 (quant.h), 2.8e-4
//        relative per matmul. Rounding is discontinuous, so each later
//        quantization turns that difference (or a 1-ulp one from summation
//        order that moves a scale across an F16 midpoint) into whole-step
//        code changes: measured, the sides agree to 4% of the error with
//        only the LM head Q8_0 but keep a correlation of only ~0.5 over
//        2 layers (less with depth), and aorta's own AVX2 and AVX-512 paths
//        diverge the same way once given F16 scales. Nothing ties the two
//        errors together, so they add as independent: r = sqrt(2) * 5.7e-3.
// A model has S = 4 * n_layers + 1 such matmul inputs on the path to the
// logits (QKV, O, gate/up, down per block, then the LM head), each adding an
// independent relative error r to what it feeds, so a logit carries
// sigma ~ r * sqrt(S) * rms(logits) (attention and SiLU amplify little at
// these scales; the measured maxima are ~2 sigma). The largest of ~600 draws
// (k >= 10 tokens x 58 positions) of a normal is ~3.3 sigma: TOL = 5 sigma.
const R = {f32: 2 ** -20, f16: 2 ** -11 / Math.sqrt(3), q8_0: Math.SQRT2 * 5.7e-3};
function tolerance(dtype, nLayers, logitRms) {
	return 5 * R[dtype] * Math.sqrt(4 * nLayers + 1) * logitRms;
}

// ---- cases ---------------------------------------------------------------
// Shapes small enough to run in a second each, wide enough that logits are
// peaked (top-2 gaps well above TOL at most positions; see the printed gaps).
const SHAPE = ["--layers", "2", "--hidden", "128", "--heads", "4", "--kv-heads", "2",
	"--ffn", "256"];
const CASES = [
	{name: "llama-f32", arch: "llama", dtype: "f32", seed: 7},
	{name: "llama-f16", arch: "llama", dtype: "f16", seed: 7},
	{name: "llama-q8_0", arch: "llama", dtype: "q8_0", seed: 7},
	{name: "qwen2-f16", arch: "qwen2", dtype: "f16", seed: 11},
	{name: "qwen3-f32", arch: "qwen3", dtype: "f32", seed: 13,
		extra: ["--head-dim", "64"]},
	{name: "qwen3-q8_0", arch: "qwen3", dtype: "q8_0", seed: 13,
		extra: ["--head-dim", "64"]},
];
// BOS, then the bytes of a sentence (the generator's vocabulary: id = byte).
const PROMPT = [264, ...Buffer.from("The quick brown fox jumps over the")];
const N_GEN = 24;
const TOP_K = 10;

// ---- helpers -------------------------------------------------------------
function logSoftmax(row) {
	let max = -Infinity;
	for (const v of row) max = Math.max(max, v);
	let sum = 0;
	for (const v of row) sum += Math.exp(v - max);
	const lse = max + Math.log(sum);
	return row.map((v) => v - lse);
}
function topIds(lp, k) {
	return [...lp.keys()].sort((a, b) => lp[b] - lp[a] || a - b).slice(0, k);
}
function rms(rows) {
	let s = 0, n = 0;
	for (const r of rows) for (const v of r) { s += v * v; n++; }
	return Math.sqrt(s / n);
}
// llama.cpp's next-token probabilities (a Map over the whole vocabulary) as
// a log-prob array.
function llamaLogProbs(probs, vocab) {
	if (!probs || probs.size !== vocab)
		throw new Error(`llama.cpp returned ${probs ? probs.size : 0} probabilities, want ${vocab}`);
	const lp = new Array(vocab);
	for (const [t, p] of probs) lp[t] = Math.log(p);
	return lp;
}
const greedyNext = {generateNext: {token: true, probabilities: true, options: {temperature: 0}}};

async function llamaRun(llama, file, prompt, nGen, vocab) {
	const model = await llama.loadModel({modelPath: file});
	// One thread: with two, each single-token step of these tiny models waits
	// ~300 ms on ggml's thread pool when the machine is busy (measured).
	const ctx = await model.createContext({
		contextSize: 128, batchSize: 128, threads: 1, flashAttention: false,
		experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
	});
	try {
		const seq = ctx.getSequence();
		const out = await seq.controlledEvaluate(prompt.map((t) => [t, greedyNext]));
		const lps = prompt.map((_, i) => llamaLogProbs(out[i].next.probabilities, vocab));
		const tokens = [...prompt];
		let next = out[prompt.length - 1].next.token;
		for (let g = 0; g < nGen; g++) {
			tokens.push(next);
			if (g === nGen - 1) break;
			const [o] = await seq.controlledEvaluate([[next, greedyNext]]);
			lps.push(llamaLogProbs(o.next.probabilities, vocab));
			next = o.next.token;
		}
		return {tokens, lps};
	} finally {
		await ctx.dispose();
		await model.dispose();
	}
}

// ---- one case ------------------------------------------------------------
async function runCase(llama, dir, c) {
	const file = path.join(dir, c.name + ".gguf");
	execFileSync(aorta, ["make-model", "--out", file, "--arch", c.arch, "--dtype", c.dtype,
		"--seed", String(c.seed), ...SHAPE, ...(c.extra || [])], {stdio: "ignore"});
	const a = JSON.parse(execFileSync(aortaLogits,
		[file, String(N_GEN), ...PROMPT.map(String)], {maxBuffer: 1 << 28}).toString());
	const l = await llamaRun(llama, file, PROMPT, N_GEN, a.vocab);

	const tol = tolerance(c.dtype, 2, rms(a.logits));
	const fails = [];
	let maxErr = 0, minGap = Infinity, nPos = 0, nTop1 = 0, agreedGen = 0, tieAt = -1;
	// positions whose prefix is the same on both sides: the prompt, then
	// generated tokens while they agree
	for (let p = 0; p < a.tokens.length - 1; p++) {
		if (p >= PROMPT.length && a.tokens[p] !== l.tokens[p]) break;
		const la = logSoftmax(a.logits[p]), ll = l.lps[p];
		const ta = topIds(la, TOP_K), tl = topIds(ll, TOP_K);
		for (const t of new Set([...ta, ...tl])) {
			const e = Math.abs(la[t] - ll[t]);
			maxErr = Math.max(maxErr, e);
			if (e > tol) fails.push(`pos ${p} token ${t}: aorta ${la[t].toFixed(6)} llama.cpp ${ll[t].toFixed(6)}`);
		}
		const gap = la[ta[0]] - la[ta[1]];
		const tie = gap < 2 * tol;
		minGap = Math.min(minGap, gap);
		nPos++;
		if (ta[0] === tl[0]) nTop1++;
		else if (!tie) fails.push(`pos ${p}: top-1 aorta ${ta[0]} llama.cpp ${tl[0]} (gap ${gap.toFixed(4)})`);
		if (p >= PROMPT.length - 1) {
			// a.tokens[p+1] is aorta's greedy choice here, l.tokens[p+1] llama.cpp's
			if (a.tokens[p + 1] === l.tokens[p + 1]) {
				agreedGen++;
			} else {
				if (!tie) fails.push(`greedy token ${p + 1 - PROMPT.length}: aorta ${a.tokens[p + 1]} llama.cpp ${l.tokens[p + 1]} (gap ${gap.toFixed(4)} >= ${(2 * tol).toFixed(4)})`);
				tieAt = p + 1 - PROMPT.length;
				break;
			}
		}
	}
	console.log(`${c.name.padEnd(11)} max|dlogprob| ${maxErr.toExponential(2)}  tol ${tol.toExponential(2)}` +
		`  (${(maxErr / tol).toFixed(2)} of tol)  top-1 ${nTop1}/${nPos}  min top-2 gap ${minGap.toFixed(4)}` +
		`  greedy ${agreedGen}/${N_GEN}${tieAt >= 0 ? ` (near-tie at ${tieAt})` : ""}  ${fails.length ? "FAIL" : "ok"}`);
	for (const f of fails.slice(0, 8)) console.log("    " + f);
	return fails.length === 0;
}

const llama = await getLlama({gpu: false, build: "never", progressLogs: false,
	logLevel: LlamaLogLevel.error});
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "aorta-llama-"));
let ok = true;
try {
	for (const c of CASES) ok = (await runCase(llama, dir, c)) && ok;
} finally {
	fs.rmSync(dir, {recursive: true, force: true});
}
console.log(ok ? "llama.cpp agrees with aorta on every case" : "FAIL: aorta and llama.cpp differ");
process.exit(ok ? 0 : 1);
