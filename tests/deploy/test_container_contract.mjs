// tests/deploy/test_container_contract.mjs — what the images and pods rely on,
// run against the aorta built here (no Docker): the Dockerfile.cpu CMD (with
// /models pointed at a temp dir holding a demo model, and a free port) starts
// the server; the HEALTHCHECK command goes from failing to passing; /health
// needs no key while /metrics needs the $AORTA_API_KEY bearer token (what the
// ServiceMonitor sends) and lists the metric the HPA reads; after SIGTERM a
// stream already running finishes with [DONE] while /health and new requests
// get 503, and the process exits 0 within --shutdown-timeout (the preStop /
// grace-period arithmetic in deploy/ assumes exactly this). Suite e2e.
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { execFileSync, spawn } from "node:child_process";
import { Checks, METRIC_MACRO, aortaBinary, argPairs, read } from "./lib.mjs";

const c = new Checks("deploy container contract");
const bin = aortaBinary();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "aorta-deploy-"));
const key = "deploy-test-key";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const freePort = () => new Promise((res, rej) => {
	const s = net.createServer();
	s.listen(0, "127.0.0.1", () => {
		const p = s.address().port;
		s.close(() => res(p));
	});
	s.on("error", rej);
});

// The runtime stage's CMD / HEALTHCHECK, exec form.
const df = read("deploy/docker/Dockerfile.cpu").replace(/\\\n\s*/g, " ");
const cmd = JSON.parse(/^CMD\s+(\[.*\])\s*$/m.exec(df)[1]);
const hc = JSON.parse(/^HEALTHCHECK\s+.*?CMD\s+(\[.*\])\s*$/m.exec(df)[1]);
const port = await freePort();
const dport = String(Object.fromEntries(argPairs(cmd))["--port"]);
const model = Object.fromEntries(argPairs(cmd))["--model"];
c.ok(model && model.startsWith("/models/"), `CMD serves a file under /models (${model})`);

execFileSync(bin, ["make-model", "--out", path.join(dir, path.basename(model))], { stdio: "ignore" });
const args = cmd.map((a) => (a === model ? path.join(dir, path.basename(model)) : a === dport ? String(port) : a));
// a drain long enough for the stream below on a loaded machine
const shutdown = 60;
args.push("--shutdown-timeout", String(shutdown));
const hcmd = hc.map((a) => a.replace(`:${dport}/`, `:${port}/`));

const srv = spawn(bin, ["serve", ...args], { env: { ...process.env, AORTA_API_KEY: key }, stdio: ["ignore", "pipe", "pipe"] });
let log = "";
srv.stdout.on("data", (d) => (log += d));
srv.stderr.on("data", (d) => (log += d));
const exited = new Promise((res) => srv.on("exit", (code, sig) => res({ code, sig, at: Date.now() })));

const base = `http://127.0.0.1:${port}`;
const get = async (p, auth) => {
	try {
		const r = await fetch(base + p, { headers: auth ? { Authorization: `Bearer ${auth}` } : {} });
		return { status: r.status, body: await r.text() };
	} catch {
		return { status: 0, body: "" };
	}
};
const healthcheck = () => {
	try {
		execFileSync(hcmd[0], hcmd.slice(1), { stdio: "ignore", timeout: 5000 });
		return true;
	} catch {
		return false;
	}
};
let hasCurl = true;
try {
	execFileSync(hcmd[0], ["--version"], { stdio: "ignore" });
} catch {
	hasCurl = false;
	console.log(`note: ${hcmd[0]} not installed here; HEALTHCHECK command not run`);
}

try {
	let ready = false;
	for (let i = 0; i < 300 && !ready; i++) {
		ready = hasCurl ? healthcheck() : (await get("/health")).status === 200;
		if (!ready) await sleep(100);
	}
	c.ok(ready, "HEALTHCHECK passes once the model is loaded");
	c.eq((await get("/health")).status, 200, "/health needs no key");
	c.eq((await get("/metrics")).status, 401, "/metrics without the key: 401 (the ServiceMonitor must send it)");
	const m = await get("/metrics", key);
	c.eq(m.status, 200, "/metrics with the bearer key");
	c.ok(m.body.includes(`${METRIC_MACRO("API_M_REQUESTS_WAITING")}{`), "/metrics has the HPA's gauge");
	const models = JSON.parse((await get("/v1/models", key)).body);
	const id = models.data[0].id;

	// a stream in flight when SIGTERM arrives
	const resp = await fetch(`${base}/v1/completions`, {
		method: "POST",
		headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
		body: JSON.stringify({ model: id, prompt: "hello", max_tokens: 1500, ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
	});
	const reader = resp.body.getReader();
	const dec = new TextDecoder();
	let text = "";
	const first = await reader.read();
	text += dec.decode(first.value || new Uint8Array());
	const termAt = Date.now();
	srv.kill("SIGTERM");
	await sleep(50); /* short: on a quiet machine a stream finishes quickly */
	const h = await get("/health");
	c.eq(h.status, 503, "/health is 503 while draining (readiness takes the pod out)");
	if (hasCurl) c.ok(!healthcheck(), "HEALTHCHECK fails while draining");
	const late = await fetch(`${base}/v1/completions`, {
		method: "POST",
		headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
		body: JSON.stringify({ model: id, prompt: "hi", max_tokens: 4 }),
	}).then((r) => r.status, () => 0);
	c.eq(late, 503, "a new request during the drain gets 503");
	for (;;) {
		const { value, done } = await reader.read();
		if (done) break;
		text += dec.decode(value);
	}
	c.ok(/data: \[DONE\]\s*$/.test(text), "the stream running at SIGTERM finished with [DONE]");
	const usage = (text.match(/"completion_tokens":(\d+)/) || [])[1];
	c.eq(Number(usage), 1500, "...with all its tokens (usage.completion_tokens = max_tokens)");
	c.ok(/"finish_reason":"length"/.test(text), "...finishing for length, not cancelled");
	const ex = await Promise.race([exited, sleep((shutdown + 10) * 1000).then(() => null)]);
	c.ok(ex && ex.code === 0, `exit 0 after the drain (${ex ? `code ${ex.code}` : "still running"})`);
	if (ex) c.ok(ex.at - termAt <= shutdown * 1000 + 2000, `exited within --shutdown-timeout (${((ex.at - termAt) / 1000).toFixed(1)} s)`);
} finally {
	if (srv.exitCode === null) srv.kill("SIGKILL");
	fs.rmSync(dir, { recursive: true, force: true });
	if (c.failed.length) console.log("server log:\n" + log);
}
c.done();
