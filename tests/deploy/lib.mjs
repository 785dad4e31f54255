// tests/deploy/lib.mjs — shared by the deploy/ tests: where things are, the
// server's facts read from its source and binary (metric names and types,
// `aorta serve` flags and defaults, routes), and Kubernetes validation:
// the kubernetes-models JSON schemas (types, required fields, enums) plus a
// strict unknown-field check (like `kubectl apply --validate=strict`), which
// the schemas alone do not do, driven by the field lists in the packages'
// TypeScript declarations.
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
export const YAML = require("yaml");

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = process.env.AORTA_SOURCE_ROOT || path.resolve(HERE, "../..");
export const DEPLOY = path.join(ROOT, "deploy");
export const CHART = path.join(DEPLOY, "helm", "aorta");

// ---- tiny test harness: every check is counted, failures are listed ----------

export class Checks {
	constructor(name) {
		this.name = name;
		this.n = 0;
		this.failed = [];
	}
	ok(cond, what) {
		this.n++;
		if (!cond) {
			this.failed.push(what);
			console.log(`FAIL ${what}`);
		}
		return !!cond;
	}
	eq(got, want, what) {
		return this.ok(JSON.stringify(got) === JSON.stringify(want),
			`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
	}
	done() {
		console.log(`${this.name}: ${this.n - this.failed.length}/${this.n} checks passed`);
		process.exit(this.failed.length ? 1 : 0);
	}
}

export function read(rel) {
	return fs.readFileSync(path.join(ROOT, rel), "utf8");
}

export function yamlDocs(text, where) {
	const docs = YAML.parseAllDocuments(text);
	const out = [];
	for (const d of docs) {
		if (d.errors.length) throw new Error(`${where}: ${d.errors[0].message}`);
		const v = d.toJS();
		if (v !== null && v !== undefined) out.push(v);
	}
	return out;
}

// ---- server facts -------------------------------------------------------------

// { name -> "gauge" | "counter" | "histogram" } from api/metrics_text.h (the
// names) and server/info.c (how each is emitted).
export function serverMetrics() {
	const h = read("api/metrics_text.h");
	const srv = read("server/info.c");
	const byMacro = {};
	for (const m of h.matchAll(/#define\s+(API_M_\w+)\s+"([^"]+)"/g)) byMacro[m[1]] = m[2];
	if (!Object.keys(byMacro).length) throw new Error("no API_M_* names in api/metrics_text.h");
	const out = {};
	for (const [macro, name] of Object.entries(byMacro)) {
		if (new RegExp(`api_metrics_gauge\\([^,]+,\\s*${macro}\\b`).test(srv)) out[name] = "gauge";
		else if (new RegExp(`api_metrics_counter(_series)?\\([^,]+,\\s*${macro}\\b`).test(srv)) out[name] = "counter";
		else if (new RegExp(`metrics_hist\\([^,]+,\\s*${macro}\\b`).test(srv)) out[name] = "histogram";
		else throw new Error(`${macro} (${name}) is not emitted by server/info.c`);
	}
	return out;
}

export const METRIC_MACRO = (macro) => {
	const m = new RegExp(`#define\\s+${macro}\\s+"([^"]+)"`).exec(read("api/metrics_text.h"));
	if (!m) throw new Error(`${macro} not in api/metrics_text.h`);
	return m[1];
};

// Series names a PromQL query may use for the server's metrics.
export function seriesNames(metrics) {
	const s = new Set();
	for (const [n, t] of Object.entries(metrics)) {
		if (t === "histogram") for (const suf of ["_bucket", "_sum", "_count"]) s.add(n + suf);
		else s.add(n);
	}
	return s;
}

// aorta:... names used in a PromQL expression.
export function promqlMetrics(expr) {
	return [...expr.matchAll(/\baorta:[a-zA-Z0-9_:]+/g)].map((m) => m[0]);
}

export function aortaBinary() {
	const b = process.env.AORTA_BUILD_ROOT && path.join(process.env.AORTA_BUILD_ROOT, "server", "aorta");
	if (!b || !fs.existsSync(b)) throw new Error(`no aorta binary at ${b} (AORTA_BUILD_ROOT)`);
	return b;
}

// `aorta serve --help` -> { flags: Set("--port", ...), defaults: { "--port": "8080", ... } }
export function serveFlags() {
	const help = execFileSync(aortaBinary(), ["serve", "--help"], { encoding: "utf8" });
	const flags = new Set();
	const defaults = {};
	for (const line of help.split("\n")) {
		const m = /^\s+(--[a-z0-9-]+)/.exec(line);
		if (!m) continue;
		for (const f of line.matchAll(/(?:^|[\s,])(--[a-z0-9-]+)/g)) flags.add(f[1]);
		const d = /\(default ([^)]+)\)\s*$/.exec(line);
		if (d) defaults[m[1]] = d[1];
	}
	if (!flags.has("--model")) throw new Error("aorta serve --help lists no --model");
	return { flags, defaults, help };
}

// Routes from server/routes.c's table: { "/health": { method, isPublic } }.
export function serverRoutes() {
	const srv = read("server/routes.c");
	const out = {};
	for (const m of srv.matchAll(/\{\s*"(\/[^"]*)",\s*"([A-Z]+)",\s*([^,]+),\s*\w+\s*\}/g))
		out[m[1]] = { method: m[2], isPublic: /\bR_PUBLIC\b/.test(m[3]) };
	return out;
}

// Seconds of no engine progress after which /health says 503 (server/info.c).
export function stuckAfterSeconds() {
	const m = /#define\s+STUCK_AFTER_S\s+([0-9.]+)/.exec(read("server/info.c"));
	if (!m) throw new Error("STUCK_AFTER_S not found in server/info.c");
	return Number(m[1]);
}

// Flags of an args list with their values: ["--port", "8080", "--x"] ->
// [["--port", "8080"], ["--x", undefined]]. --flag=value is split too.
export function argPairs(args) {
	const out = [];
	for (let i = 0; i < args.length; i++) {
		const a = String(args[i]);
		if (!a.startsWith("--")) continue;
		const eq = a.indexOf("=");
		if (eq > 0) out.push([a.slice(0, eq), a.slice(eq + 1)]);
		else if (i + 1 < args.length && !String(args[i + 1]).startsWith("--")) out.push([a, String(args[++i])]);
		else out.push([a, undefined]);
	}
	return out;
}

// ---- Kubernetes validation ----------------------------------------------------

const NM = path.join(HERE, "node_modules");

function modelModule(apiVersion) {
	if (apiVersion === "monitoring.coreos.com/v1") return { pkg: "@kubernetes-models/prometheus-operator", sub: "monitoring.coreos.com/v1" };
	return { pkg: "kubernetes-models", sub: apiVersion };
}

export async function modelClass(apiVersion, kind) {
	const { pkg, sub } = modelModule(apiVersion);
	const mod = await import(`${pkg}/${sub}`);
	if (!mod[kind]) throw new Error(`no schema for ${apiVersion} ${kind}`);
	return { cls: mod[kind], dts: path.join(NM, pkg, sub, `${kind}.d.ts`) };
}

// d.ts parsing: interface fields and what type each one has.
const dtsCache = new Map();

function resolveImport(fromFile, spec) {
	let p;
	if (spec.startsWith(".")) p = path.resolve(path.dirname(fromFile), spec);
	else p = path.join(NM, spec);
	return p.replace(/\.js$/, "") + ".d.ts";
}

function splitTop(body, sep) {
	const parts = [];
	let depth = 0, cur = "";
	for (const c of body) {
		if (c === "{" || c === "<" || c === "(" || c === "[") depth++;
		if (c === "}" || c === ">" || c === ")" || c === "]") depth--;
		if (c === sep && depth === 0) {
			parts.push(cur);
			cur = "";
		} else cur += c;
	}
	if (cur.trim()) parts.push(cur);
	return parts;
}

function parseDts(file) {
	if (dtsCache.has(file)) return dtsCache.get(file);
	const src = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
	const imports = {};
	for (const m of src.matchAll(/import\s*\{([^}]+)\}\s*from\s*"([^"]+)"/g))
		for (const n of m[1].split(",")) imports[n.trim()] = m[2];
	const m = /export interface (\w+)(?:\s+extends\s+([^{]+))?\s*\{([\s\S]*?)\n\}/.exec(src);
	const info = { file, imports, iface: m && m[1], parents: m && m[2] ? m[2].split(",").map((s) => s.trim()) : [], body: m ? m[3] : null };
	dtsCache.set(file, info);
	return info;
}

// A type expression -> spec: { k: "struct", fields } | { k: "array", of } |
// { k: "map", of } | { k: "leaf" }. Unknown shapes are leaves (permissive).
function typeSpec(t, ctx) {
	t = t.trim();
	let m;
	if ((m = /^Array<([\s\S]*)>$/.exec(t))) return { k: "array", of: () => typeSpec(m[1], ctx) };
	if ((m = /^\{\s*\[key: string\]:\s*([\s\S]*?);?\s*\}$/.exec(t))) return { k: "map", of: () => typeSpec(m[1], ctx) };
	if (t.startsWith("{")) return { k: "struct", fields: () => fieldsOf(t.slice(1, -1), ctx) };
	if (/^[A-Za-z_]\w*$/.test(t) && ctx.imports[t]) {
		const f = resolveImport(ctx.file, ctx.imports[t]);
		if (fs.existsSync(f)) {
			const info = parseDts(f);
			if (info.body !== null) return { k: "struct", fields: () => ifaceFields(info) };
		}
	}
	return { k: "leaf" };
}

function fieldsOf(body, ctx) {
	const out = {};
	for (const part of splitTop(body, ";")) {
		const m = /^\s*"([^"]+)"\??:\s*([\s\S]*)$/.exec(part);
		if (m) out[m[1]] = typeSpec(m[2], ctx);
	}
	return out;
}

function ifaceFields(info) {
	const out = fieldsOf(info.body, info);
	for (const p of info.parents) {
		if (p === "TypeMeta") continue;
		const spec = typeSpec(p, info);
		if (spec.k === "struct") Object.assign(out, spec.fields());
	}
	return out;
}

function strict(v, spec, at, errs) {
	if (v === null || v === undefined) return;
	if (spec.k === "array" && Array.isArray(v)) v.forEach((x, i) => strict(x, spec.of(), `${at}[${i}]`, errs));
	else if (spec.k === "map" && typeof v === "object") for (const [k, x] of Object.entries(v)) strict(x, spec.of(), `${at}.${k}`, errs);
	else if (spec.k === "struct" && typeof v === "object" && !Array.isArray(v)) {
		const fields = spec.fields();
		for (const [k, x] of Object.entries(v)) {
			if (!(k in fields)) errs.push(`${at}: unknown field "${k}"`);
			else strict(x, fields[k], `${at}.${k}`, errs);
		}
	}
}

// Errors (strings) for one manifest object; [] when it is valid.
export async function validateObject(obj) {
	if (!obj || typeof obj !== "object" || !obj.apiVersion || !obj.kind) return ["not a Kubernetes object (apiVersion/kind missing)"];
	let mc;
	try {
		mc = await modelClass(obj.apiVersion, obj.kind);
	} catch (e) {
		return [e.message];
	}
	const errs = [];
	try {
		new mc.cls(obj).validate();
	} catch (e) {
		errs.push(`schema: ${e.message}`);
	}
	const info = parseDts(mc.dts);
	strict(obj, { k: "struct", fields: () => ifaceFields(info) }, obj.kind, errs);
	if (!obj.metadata || !obj.metadata.name) errs.push("metadata.name missing");
	else if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(obj.metadata.name) || obj.metadata.name.length > 63)
		errs.push(`metadata.name "${obj.metadata.name}" is not a DNS-1123 label`);
	return errs;
}

// Label selector {k: v} matches labels?
export function selects(selector, labels) {
	return Object.entries(selector || {}).every(([k, v]) => labels && labels[k] === v) && Object.keys(selector || {}).length > 0;
}
