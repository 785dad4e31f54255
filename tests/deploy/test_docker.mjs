// tests/deploy/test_docker.mjs — deploy/docker/Dockerfile.{cuda,cpu} without a
// Docker engine: dockerfilelint finds nothing; every COPY source exists and
// passes the Dockerfile's .dockerignore; the build stage copies every source
// folder meson.build needs, installs the build packages of
// tools/install-deps.sh and passes only real meson options (GPU_ARCHS feeds
// gpu_archs, with the same default); the CUDA base tags match the toolkit
// here; the runtime stage has no compiler, runs as a numeric non-root user,
// ENTRYPOINT ["aorta","serve"], HEALTHCHECK on /health at the default port,
// CMD flags that `aorta serve --help` knows; runtime-packages.sh on the
// binary built here names the runtime libraries.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { Checks, HERE, ROOT, aortaBinary, argPairs, read, serveFlags, serverRoutes } from "./lib.mjs";

const c = new Checks("deploy docker");
const { flags, defaults } = serveFlags();
const port = Number(defaults["--port"]);
c.ok(Number.isInteger(port), `aorta serve --help gives the default port (${port})`);
c.ok(serverRoutes()["/health"], "server/routes.c routes GET /health");

function lint(file) {
	let out;
	try {
		out = execFileSync(path.join(HERE, "node_modules", ".bin", "dockerfilelint"), ["-j", file], { encoding: "utf8" });
	} catch (e) {
		out = e.stdout; // exits non-zero when it finds issues
	}
	return JSON.parse(out).files[0].issues;
}

// Instructions with continuation lines joined and comments dropped, each
// tagged with its stage (0-based).
function parse(text) {
	const lines = text.split("\n");
	const out = [];
	let cur = "", stage = -1;
	for (const raw of lines) {
		const l = raw.replace(/\s+$/, "");
		if (!cur && (/^\s*#/.test(l) || !l.trim())) continue;
		if (cur && /^\s*#/.test(l)) continue; // comment inside a continued instruction
		cur += (cur ? " " : "") + l.trim().replace(/\\$/, "").trim();
		if (l.endsWith("\\")) continue;
		const m = /^(\w+)\s+([\s\S]*)$/.exec(cur);
		cur = "";
		if (!m) continue;
		const ins = m[1].toUpperCase();
		if (ins === "FROM") stage++;
		out.push({ ins, arg: m[2], stage });
	}
	return out;
}

// .dockerignore as the Dockerfiles use it: "*" then "!path" exceptions, then
// excludes; last match wins. Enough for our file (checked to be only that).
function ignored(rules, rel) {
	let ign = false;
	for (const r of rules) {
		const neg = r.startsWith("!");
		const pat = (neg ? r.slice(1) : r).replace(/\/$/, "");
		const re = new RegExp("^" + pat.split("/").map((seg) => seg === "**" ? ".*" : seg.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/]*")).join("/").replace(/\.\*\//g, "(.*/)?") + "(/.*)?$");
		if (re.test(rel)) ign = !neg;
	}
	return ign;
}

const mesonOpts = {};
for (const m of read("meson_options.txt").matchAll(/option\('([^']+)'[\s\S]*?value\s*:\s*('([^']*)'|\w+)/g)) mesonOpts[m[1]] = m[3] !== undefined ? m[3] : m[2];
const topSubdirs = [...read("meson.build").matchAll(/^subdir\('([^']+)'\)/gm)].map((m) => m[1]);
const depsPkgs = /pkgs=\(([^)]*)\)/.exec(read("tools/install-deps.sh"))[1].split(/\s+/).filter(Boolean);
// test-only or tooling packages a -Dtests=false build does not need
const buildPkgs = depsPkgs.filter((p) => !["check", "python3", "python3-numpy", "curl"].includes(p));
const cudaVersion = (() => {
	try {
		const v = execFileSync("/usr/local/cuda/bin/nvcc", ["--version"], { encoding: "utf8" });
		const m = /release (\d+\.\d+)/.exec(v);
		return m && m[1];
	} catch {
		return null;
	}
})();

for (const variant of ["cuda", "cpu"]) {
	const rel = `deploy/docker/Dockerfile.${variant}`;
	const file = path.join(ROOT, rel);
	const text = read(rel);
	const L = (what) => `${rel}: ${what}`;

	// lint. dockerfilelint 1.8 reads HEALTHCHECK options with /--\w+/, which
	// cuts "--start-period" to "--start" and reports a valid option as invalid;
	// that one report is excused only if the line lints clean without it.
	for (const is of lint(file)) {
		const startPeriodBug = is.title === "Invalid Argument Format" && /^HEALTHCHECK\b/.test(is.content) && /--start-period=/.test(is.content);
		if (startPeriodBug) {
			const tmp = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "aorta-lint-")), "Dockerfile");
			fs.writeFileSync(tmp, text.replace(/--start-period=\S+\s*/, ""));
			const again = lint(tmp);
			c.eq(again.map((x) => x.title), [], L("lints clean with the HEALTHCHECK --start-period false positive removed"));
			fs.rmSync(path.dirname(tmp), { recursive: true });
		} else c.ok(false, L(`dockerfilelint line ${is.line}: ${is.title} (${is.content})`));
	}

	const ins = parse(text);
	const stages = Math.max(...ins.map((i) => i.stage)) + 1;
	c.eq(stages, 2, L("two stages (build, runtime)"));
	const froms = ins.filter((i) => i.ins === "FROM").map((i) => i.arg);
	const argDefaults = {};
	for (const i of ins.filter((x) => x.ins === "ARG")) {
		const m = /^(\w+)=(.*)$/.exec(i.arg);
		if (m) argDefaults[m[1]] = m[2];
	}
	const expand = (s) => s.replace(/\$\{(\w+)\}/g, (_, k) => argDefaults[k] ?? `\${${k}}`);
	if (variant === "cuda") {
		c.ok(/^nvidia\/cuda:\$\{CUDA_VERSION\}-devel-ubuntu\$\{UBUNTU_VERSION\} AS build$/.test(froms[0]), L(`build stage on the CUDA devel image (${froms[0]})`));
		c.ok(/^nvidia\/cuda:\$\{CUDA_VERSION\}-runtime-ubuntu\$\{UBUNTU_VERSION\}$/.test(froms[1]), L(`runtime stage on the matching CUDA runtime image (${froms[1]})`));
		if (cudaVersion) c.ok((argDefaults.CUDA_VERSION || "").startsWith(cudaVersion + "."), L(`CUDA_VERSION ${argDefaults.CUDA_VERSION} matches the toolkit here (${cudaVersion})`));
		else console.log("note: no nvcc here; CUDA_VERSION not compared with a toolkit");
		// gpu_archs=auto compiles for the visible GPU, or for meson.build's
		// no-GPU list; an image is built where no GPU is visible
		let archDefault = mesonOpts.gpu_archs;
		if (archDefault === "auto") {
			const m = /else\s+gpu_archs = '([0-9a-z,]+)'/.exec(read("meson.build"));
			archDefault = m ? m[1] : "(no fallback list in meson.build)";
		}
		c.eq(argDefaults.GPU_ARCHS, archDefault, L("GPU_ARCHS default = the meson gpu_archs a build without a visible GPU gets"));
	} else {
		c.eq(expand(froms[0]), "debian:bookworm-slim AS build", L("build stage on debian:bookworm-slim"));
		c.eq(expand(froms[1]), "debian:bookworm-slim", L("runtime stage on debian:bookworm-slim"));
	}

	// build stage
	const b = ins.filter((i) => i.stage === 0);
	const bRun = b.filter((i) => i.ins === "RUN").map((i) => i.arg).join(" && ");
	for (const p of buildPkgs) c.ok(new RegExp(`(^|\\s)${p.replace(/[+.]/g, "\\$&")}(\\s|$)`).test(bRun), L(`build stage installs ${p} (tools/install-deps.sh)`));
	const setup = /meson setup (\S+) ([^&]*)/.exec(bRun);
	if (c.ok(setup, L("build stage runs meson setup"))) {
		const opts = [...setup[2].matchAll(/-D([\w-]+)=("[^"]*"|\S+)/g)].map((m) => [m[1], m[2].replace(/"/g, "")]);
		for (const [k] of opts) c.ok(k in mesonOpts || ["buildtype"].includes(k), L(`-D${k} is a meson option`));
		c.ok(/--buildtype=release/.test(setup[2]), L("release build"));
		c.ok(opts.some(([k, v]) => k === "tests" && v === "false"), L("-Dtests=false"));
		c.ok(opts.some(([k, v]) => k === "cuda" && v === (variant === "cuda" ? "enabled" : "disabled")), L(`-Dcuda=${variant === "cuda" ? "enabled" : "disabled"}`));
		if (variant === "cuda") c.ok(opts.some(([k, v]) => k === "gpu_archs" && v === "${GPU_ARCHS}"), L("-Dgpu_archs from the GPU_ARCHS build arg"));
		c.ok(new RegExp(`ninja -C ${setup[1]}\\b`).test(bRun), L("ninja builds the configured dir"));
	}

	// COPY sources: exist, not excluded by the Dockerfile's own .dockerignore
	const ignFile = path.join(ROOT, `${rel}.dockerignore`);
	c.ok(fs.existsSync(ignFile), L("has its own .dockerignore"));
	const ignRules = fs.existsSync(ignFile) ? fs.readFileSync(ignFile, "utf8").split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#")) : [];
	const copied = [];
	for (const i of ins.filter((x) => x.ins === "COPY" && !/--from=/.test(x.arg))) {
		const parts = i.arg.split(/\s+/).filter((p) => !p.startsWith("--"));
		for (const src of parts.slice(0, -1)) {
			const s = src.replace(/\/$/, "");
			copied.push(s);
			c.ok(fs.existsSync(path.join(ROOT, s)), L(`COPY source ${s} exists`));
			c.ok(!ignored(ignRules, s), L(`COPY source ${s} is not excluded by the .dockerignore`));
		}
	}
	for (const d of topSubdirs.filter((d) => d !== "tests")) c.ok(copied.includes(d), L(`copies ${d}/ (meson.build subdir)`));
	for (const f of ["meson.build", "meson_options.txt"]) c.ok(copied.includes(f), L(`copies ${f}`));
	c.ok(ignored(ignRules, "build/server/aorta") && ignored(ignRules, "tests/e2e/node_modules/x") && ignored(ignRules, "models/demo.gguf"), L(".dockerignore keeps build dirs, node_modules and models out"));

	// runtime stage
	const r = ins.filter((i) => i.stage === 1);
	const rRun = r.filter((i) => i.ins === "RUN").map((i) => i.arg).join(" && ");
	c.ok(!/\b(gcc|g\+\+|clang|build-essential|meson|ninja-build|nvcc|cuda-nvcc[\w-]*|[\w.+-]+-dev)\b/.test(rRun), L("runtime stage installs no compiler, build tool or -dev package"));
	c.ok(/runtime-packages\.txt/.test(rRun), L("runtime stage installs the packages runtime-packages.sh found"));
	c.ok(/--no-install-recommends/.test(rRun) && /rm -rf \/var\/lib\/apt\/lists/.test(rRun), L("runtime apt install is lean and cleans its lists"));
	c.ok(r.some((i) => i.ins === "COPY" && /--from=build\s+\/build\/server\/aorta\s+\/usr\/local\/bin\/aorta/.test(i.arg)), L("copies the built aorta into /usr/local/bin"));
	const user = r.filter((i) => i.ins === "USER").map((i) => i.arg).pop();
	c.ok(user && /^[1-9]\d*(:\d+)?$/.test(user), L(`numeric non-root USER (${user})`));
	c.ok(new RegExp(`useradd[^&]*--uid ${(user || "").split(":")[0]}\\b`).test(rRun), L("the USER uid exists in /etc/passwd"));
	const ep = r.filter((i) => i.ins === "ENTRYPOINT").map((i) => i.arg).pop();
	c.eq(ep && JSON.parse(ep), ["aorta", "serve"], L("ENTRYPOINT"));
	c.ok(r.some((i) => i.ins === "VOLUME" && /"\/models"/.test(i.arg)), L("VOLUME /models"));
	const expose = r.filter((i) => i.ins === "EXPOSE").map((i) => Number(i.arg)).pop();
	c.eq(expose, port, L("EXPOSE the server's default port"));
	const hc = r.filter((i) => i.ins === "HEALTHCHECK").map((i) => i.arg).pop() || "";
	c.ok(hc.includes(`http://127.0.0.1:${port}/health`), L("HEALTHCHECK GETs /health on the port"));
	c.ok(/"-f/.test(hc), L("HEALTHCHECK fails on HTTP errors (curl -f: 503 while loading/draining/stuck)"));
	c.ok(/--start-period=(\d+)s/.test(hc) && Number(/--start-period=(\d+)s/.exec(hc)[1]) >= 300, L("HEALTHCHECK start period covers a model load (>= 5 min)"));
	c.ok(/\bcurl\b/.test(rRun), L("curl (used by HEALTHCHECK) is installed in the runtime stage"));
	const cmd = r.filter((i) => i.ins === "CMD").map((i) => i.arg).pop();
	const cargs = cmd ? JSON.parse(cmd) : [];
	for (const [f] of argPairs(cargs)) c.ok(flags.has(f), L(`CMD flag ${f} is an aorta serve flag`));
	const ca = Object.fromEntries(argPairs(cargs));
	c.eq(ca["--host"], "0.0.0.0", L("CMD listens on all interfaces"));
	c.ok((ca["--model"] || "").startsWith("/models/"), L("CMD --model under /models"));
	c.eq(Number(ca["--port"] || port), port, L("CMD --port = EXPOSE = HEALTHCHECK port"));
	c.eq(ca["--device"], variant, L("CMD --device"));
}

// runtime-packages.sh on the binary this build made: the packages must name
// the server's runtime libraries (on this Debian host, the brief's list).
let hasDpkg = true;
try {
	execFileSync("dpkg-query", ["--version"], { stdio: "ignore" });
} catch {
	hasDpkg = false;
}
if (hasDpkg) {
	const pk = execFileSync("sh", [path.join(ROOT, "deploy/docker/runtime-packages.sh"), aortaBinary()], { encoding: "utf8" }).split("\n").filter(Boolean);
	for (const want of [/^libmicrohttpd12/, /^libuv1/, /^libcjson1$/, /^libpcre2-8-0$/, /^libutf8proc\d/])
		c.ok(pk.some((p) => want.test(p)), `runtime-packages.sh lists ${want} (got ${pk.join(" ")})`);
	c.ok(!pk.includes("libc6") && !pk.some((p) => /-dev$/.test(p)), "runtime-packages.sh leaves out libc6 and -dev packages");
	// a binary that links cudart/cuBLAS (as the CUDA build does once it calls
	// them): those come from the nvidia/cuda runtime base, not from apt
	const cudaLib = "/usr/local/cuda/lib64";
	if (fs.existsSync(path.join(cudaLib, "libcublas.so"))) {
		const t = fs.mkdtempSync(path.join(os.tmpdir(), "aorta-cudalink-"));
		fs.writeFileSync(path.join(t, "x.c"), "int cudaRuntimeGetVersion(int *); int cublasCreate_v2(void **);\nint main(void) { int v; void *h; return cudaRuntimeGetVersion(&v) + cublasCreate_v2(&h); }\n");
		try {
			execFileSync("cc", [path.join(t, "x.c"), "-o", path.join(t, "x"), "-Wl,--no-as-needed", `-L${cudaLib}`, "-lcudart", "-lcublas", "-lcublasLt", `-Wl,-rpath,${cudaLib}`, "-lcjson"], { stdio: "ignore" });
			const out = execFileSync("sh", [path.join(ROOT, "deploy/docker/runtime-packages.sh"), path.join(t, "x")], { encoding: "utf8" }).split("\n").filter(Boolean);
			c.eq(out, ["libcjson1"], "runtime-packages.sh leaves the CUDA libraries to the base image");
		} catch (e) {
			c.ok(false, `runtime-packages.sh on a CUDA-linked binary: ${e.message}`);
		}
		fs.rmSync(t, { recursive: true, force: true });
	} else console.log("note: no CUDA toolkit here; CUDA-linked case of runtime-packages.sh not exercised");
	let failed = false;
	try {
		execFileSync("sh", [path.join(ROOT, "deploy/docker/runtime-packages.sh"), "/nonexistent"], { stdio: "ignore" });
	} catch {
		failed = true;
	}
	c.ok(failed, "runtime-packages.sh fails on a missing binary");
} else console.log("note: no dpkg here; runtime-packages.sh not exercised");

c.done();
