// tests/deploy/helm_render.mjs — renders deploy/helm/aorta the way
// `helm template` would, for machines without helm (it cannot be installed
// here). It implements the subset of Go text/template + Sprig the chart uses
// and fails loudly on anything else, so a template feature it does not know
// is an error, not silently wrong output: actions with {{- -}} trimming,
// comments, if/else if/else, with/else, range (lists and maps), define,
// include/template, $ and $var := ..., parenthesized pipelines, and the
// functions in FUNCS below. Values: values.yaml deep-merged with -f files in
// order (maps merge, anything else replaces, null deletes), like helm.
// Stricter than helm on purpose: printing a missing value is an error (helm
// prints nothing), so a typo'd .Values path fails the tests.
// Used by test_chart.mjs and gen_manifests.mjs; CLI:
//   node tests/deploy/helm_render.mjs deploy/helm/aorta [-f values.yaml] [--name aorta]
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const YAML = require("yaml");

// ---- lexer: text and {{ actions }} with trim markers ------------------------

function lex(src, file) {
	const out = [];
	let i = 0;
	while (i < src.length) {
		const open = src.indexOf("{{", i);
		if (open < 0) {
			out.push({ t: "text", v: src.slice(i) });
			break;
		}
		let text = src.slice(i, open);
		let j = open + 2;
		const ltrim = src[j] === "-" && /\s/.test(src[j + 1] || "");
		if (ltrim) {
			j += 1;
			text = text.replace(/\s+$/, "");
		}
		if (text) out.push({ t: "text", v: text });
		// find the closing }} outside string literals
		let k = j, q = null;
		for (; k < src.length; k++) {
			const c = src[k];
			if (q) {
				if (c === "\\" && q === '"') k++;
				else if (c === q) q = null;
			} else if (c === '"' || c === "`") q = c;
			else if (c === "}" && src[k + 1] === "}") break;
		}
		if (k >= src.length) throw new Error(`${file}: unclosed action at offset ${open}`);
		let body = src.slice(j, k);
		let rtrim = false;
		if (/\s-$/.test(body)) {
			rtrim = true;
			body = body.slice(0, -1);
		}
		out.push({ t: "action", v: body.trim(), line: src.slice(0, open).split("\n").length });
		i = k + 2;
		if (rtrim) while (i < src.length && /\s/.test(src[i])) i++;
	}
	return out;
}

// ---- expression tokenizer and parser ----------------------------------------

function tokenize(s, where) {
	const toks = [];
	let i = 0;
	while (i < s.length) {
		const c = s[i];
		if (/\s/.test(c)) { i++; continue; }
		if (c === "(" || c === ")" || c === "|") { toks.push({ k: c }); i++; continue; }
		if (s.startsWith(":=", i)) { toks.push({ k: ":=" }); i += 2; continue; }
		if (c === "=" ) { toks.push({ k: "=" }); i++; continue; }
		if (c === '"') {
			let j = i + 1, v = "";
			while (j < s.length && s[j] !== '"') {
				if (s[j] === "\\") {
					const e = s[j + 1];
					v += e === "n" ? "\n" : e === "t" ? "\t" : e;
					j += 2;
				} else v += s[j++];
			}
			if (j >= s.length) throw new Error(`${where}: unterminated string`);
			toks.push({ k: "lit", v }); i = j + 1; continue;
		}
		if (c === "`") {
			const j = s.indexOf("`", i + 1);
			if (j < 0) throw new Error(`${where}: unterminated raw string`);
			toks.push({ k: "lit", v: s.slice(i + 1, j) }); i = j + 1; continue;
		}
		const m = /^(-?\d+(\.\d+)?)/.exec(s.slice(i));
		if (m && (c !== "-" || /\d/.test(s[i + 1]))) {
			toks.push({ k: "lit", v: Number(m[1]) }); i += m[1].length; continue;
		}
		if (c === "$" || c === ".") {
			const m2 = /^(\$[A-Za-z0-9_]*)?((?:\.[A-Za-z_][A-Za-z0-9_]*)*)/.exec(s.slice(i));
			const chain = m2[2] ? m2[2].split(".").filter(Boolean) : [];
			if (m2[1]) toks.push({ k: "var", name: m2[1], chain });
			else toks.push({ k: "field", chain }); // "." alone: chain []
			i += m2[0].length || 1;
			continue;
		}
		const id = /^[A-Za-z_][A-Za-z0-9_]*/.exec(s.slice(i));
		if (id) {
			const w = id[0];
			if (w === "true" || w === "false") toks.push({ k: "lit", v: w === "true" });
			else if (w === "nil") toks.push({ k: "lit", v: null });
			else toks.push({ k: "ident", v: w });
			i += w.length; continue;
		}
		throw new Error(`${where}: unexpected '${c}' in '${s}'`);
	}
	return toks;
}

// pipeline := [ $var := ] command ( '|' command )* ; command := operand+
function parsePipeline(toks, pos, where) {
	let decl = null;
	if (toks[pos] && toks[pos].k === "var" && toks[pos].chain.length === 0 && toks[pos + 1] &&
	    (toks[pos + 1].k === ":=" || toks[pos + 1].k === "=")) {
		decl = toks[pos].name;
		pos += 2;
	}
	const cmds = [];
	for (;;) {
		const args = [];
		while (pos < toks.length && toks[pos].k !== "|" && toks[pos].k !== ")") {
			const t = toks[pos];
			if (t.k === "(") {
				const r = parsePipeline(toks, pos + 1, where);
				if (!toks[r.pos] || toks[r.pos].k !== ")") throw new Error(`${where}: missing )`);
				args.push({ k: "pipe", p: r.p });
				pos = r.pos + 1;
			} else {
				args.push(t);
				pos++;
			}
		}
		if (!args.length) throw new Error(`${where}: empty command`);
		cmds.push(args);
		if (toks[pos] && toks[pos].k === "|") { pos++; continue; }
		break;
	}
	return { p: { decl, cmds }, pos };
}

function parseExpr(s, where) {
	const toks = tokenize(s, where);
	const r = parsePipeline(toks, 0, where);
	if (r.pos !== toks.length) throw new Error(`${where}: trailing tokens in '${s}'`);
	return r.p;
}

// ---- template parser: a tree of text / output / control nodes ----------------

function parseTemplate(src, file, defines) {
	const toks = lex(src, file);
	let i = 0;
	function block(stopWords) {
		const nodes = [];
		while (i < toks.length) {
			const t = toks[i];
			if (t.t === "text") { nodes.push({ n: "text", v: t.v }); i++; continue; }
			const where = `${file}:${t.line}`;
			const a = t.v;
			if (a.startsWith("/*")) {
				if (!a.endsWith("*/")) throw new Error(`${where}: bad comment`);
				i++;
				continue;
			}
			const kw = /^(if|else if|else|end|range|with|define)\b/.exec(a);
			if (kw && stopWords.includes(kw[1] === "else if" ? "else" : kw[1])) return { nodes, stop: t };
			i++;
			if (kw && (kw[1] === "if" || kw[1] === "with" || kw[1] === "range")) {
				nodes.push(control(kw[1], a.slice(kw[1].length), where));
				continue;
			}
			if (kw && kw[1] === "define") {
				const name = /^define\s+"([^"]+)"$/.exec(a);
				if (!name) throw new Error(`${where}: bad define`);
				const body = block(["end"]);
				if (!body.stop) throw new Error(`${where}: missing {{ end }} for define`);
				i++;
				defines[name[1]] = body.nodes;
				continue;
			}
			if (kw) throw new Error(`${where}: unexpected {{ ${a} }}`);
			const tm = /^template\s+("[^"]+")\s*(.*)$/.exec(a);
			if (tm) {
				nodes.push({ n: "out", p: parseExpr(`include ${tm[1]} ${tm[2] || "."}`, where), where });
				continue;
			}
			nodes.push({ n: "out", p: parseExpr(a, where), where });
		}
		return { nodes, stop: null };
	}
	// if/with/range X ... [else if Y ... | else ...] end; an else-if chain is
	// an if node in the else branch that consumes the shared end.
	function control(kind, condSrc, where) {
		const cond = parseExpr(condSrc, where);
		const body = block(["else", "end"]);
		if (!body.stop) throw new Error(`${where}: missing {{ end }}`);
		const st = body.stop.v;
		i++;
		let els = [];
		if (/^else\s+if\b/.test(st)) {
			els = [control("if", st.replace(/^else\s+if/, ""), where)];
		} else if (st === "else") {
			const e = block(["end"]);
			if (!e.stop) throw new Error(`${where}: missing {{ end }}`);
			i++;
			els = e.nodes;
		} else if (st !== "end") throw new Error(`${where}: unexpected {{ ${st} }}`);
		return { n: kind, cond, body: body.nodes, els, where };
	}
	const top = block([]);
	if (top.stop) throw new Error(`${file}: unexpected {{ ${top.stop.v} }}`);
	return top.nodes;
}

// ---- evaluation ---------------------------------------------------------------

function truthy(v) {
	if (v === null || v === undefined || v === false || v === 0 || v === "") return false;
	if (Array.isArray(v)) return v.length > 0;
	if (typeof v === "object") return Object.keys(v).length > 0;
	return true;
}

function fmt(v) {
	if (v === null || v === undefined) return "";
	if (typeof v === "string") return v;
	if (typeof v === "number" || typeof v === "boolean") return String(v);
	// Go prints maps and slices as map[...] / [...]; a template doing that is a bug
	throw new Error(`cannot print a ${Array.isArray(v) ? "list" : "map"} (use toYaml)`);
}

function toYaml(v) {
	if (v === null || v === undefined) return "null";
	return YAML.stringify(v, { sortMapEntries: true, lineWidth: 0, indentSeq: false }).replace(/\n$/, "");
}

function goPrintf(f, args) {
	let n = 0;
	return f.replace(/%([sdvq%])/g, (m, c) => {
		if (c === "%") return "%";
		const a = args[n++];
		if (c === "d") {
			if (!Number.isInteger(a)) throw new Error(`printf %d of ${a}`);
			return String(a);
		}
		if (c === "q") return JSON.stringify(fmt(a));
		return fmt(a);
	});
}

function num(v, fn) {
	const x = typeof v === "string" && /^-?\d+$/.test(v) ? Number(v) : v;
	if (typeof x !== "number") throw new Error(`${fn}: not a number: ${JSON.stringify(v)}`);
	return x;
}

const FUNCS = {
	quote: (...a) => a.map((x) => JSON.stringify(fmt(x))).join(" "),
	squote: (...a) => a.map((x) => `'${fmt(x)}'`).join(" "),
	toYaml,
	indent: (n, s) => fmt(s).split("\n").map((l) => " ".repeat(n) + l).join("\n"),
	nindent: (n, s) => "\n" + fmt(s).split("\n").map((l) => " ".repeat(n) + l).join("\n"),
	default: (d, v) => (truthy(v) ? v : d),
	add: (...a) => a.reduce((x, y) => x + num(y, "add"), 0),
	mul: (...a) => a.reduce((x, y) => x * num(y, "mul"), 1),
	printf: (f, ...a) => goPrintf(f, a),
	trunc: (n, s) => fmt(s).slice(0, n),
	trimSuffix: (suf, s) => (fmt(s).endsWith(suf) ? fmt(s).slice(0, -suf.length) : fmt(s)),
	contains: (sub, s) => fmt(s).includes(fmt(sub)),
	eq: (a, ...b) => b.some((x) => x === a),
	ne: (a, b) => a !== b,
	not: (a) => !truthy(a),
	and: (...a) => a.reduce((x, y) => (truthy(x) ? y : x)),
	or: (...a) => a.reduce((x, y) => (truthy(x) ? x : y)),
	toString: (v) => fmt(v),
	int: (v) => Math.trunc(num(v, "int")),
	required: (msg, v) => {
		if (v === null || v === undefined || v === "") throw new Error(`required: ${msg}`);
		return v;
	},
};

class Renderer {
	constructor(defines) {
		this.defines = defines;
	}

	field(base, chain, where) {
		let v = base;
		for (const k of chain) {
			if (v === null || v === undefined) return undefined; // Go: nil pointer -> <no value>
			if (typeof v !== "object" || Array.isArray(v))
				throw new Error(`${where}: .${k} of a non-map`);
			v = v[k];
		}
		return v;
	}

	operand(t, dot, vars, where) {
		switch (t.k) {
		case "lit": return t.v;
		case "field": return this.field(dot, t.chain, where);
		case "var": {
			if (!(t.name in vars)) throw new Error(`${where}: undefined variable ${t.name}`);
			return this.field(vars[t.name], t.chain, where);
		}
		case "pipe": return this.pipeline(t.p, dot, vars, where);
		default: throw new Error(`${where}: unexpected ${t.k} ${t.v || ""}`);
		}
	}

	pipeline(p, dot, vars, where) {
		let val;
		let first = true;
		for (const cmd of p.cmds) {
			const head = cmd[0];
			if (head.k === "ident") {
				const args = cmd.slice(1).map((t) => this.operand(t, dot, vars, where));
				if (!first) args.push(val);
				if (head.v === "include") {
					if (args.length !== 2) throw new Error(`${where}: include takes name and context`);
					val = this.include(args[0], args[1], where);
				} else {
					const f = FUNCS[head.v];
					if (!f) throw new Error(`${where}: function '${head.v}' is not supported`);
					try {
						val = f(...args);
					} catch (e) {
						throw new Error(`${where}: ${e.message}`);
					}
				}
			} else {
				if (cmd.length !== 1 || !first) throw new Error(`${where}: can't call a value`);
				val = this.operand(head, dot, vars, where);
			}
			first = false;
		}
		if (p.decl) {
			vars[p.decl] = val;
			return undefined; // declarations print nothing
		}
		return val;
	}

	include(name, ctx, where) {
		const body = this.defines[name];
		if (!body) throw new Error(`${where}: no template "${name}"`);
		return this.nodes(body, ctx, { $: ctx });
	}

	nodes(list, dot, vars) {
		let out = "";
		for (const n of list) {
			if (n.n === "text") out += n.v;
			else if (n.n === "out") {
				const v = this.pipeline(n.p, dot, vars, n.where);
				if (!n.p.decl) {
					if (v === undefined) throw new Error(`${n.where}: renders <no value>`);
					out += fmt(v);
				}
			} else if (n.n === "if") {
				const v = this.pipeline(n.cond, dot, { ...vars }, n.where);
				out += this.nodes(truthy(v) ? n.body : n.els, dot, { ...vars });
			} else if (n.n === "with") {
				const v = this.pipeline(n.cond, dot, { ...vars }, n.where);
				out += truthy(v) ? this.nodes(n.body, v, { ...vars }) : this.nodes(n.els, dot, { ...vars });
			} else if (n.n === "range") {
				const v = this.pipeline(n.cond, dot, { ...vars }, n.where);
				const items = Array.isArray(v) ? v
					: v && typeof v === "object" ? Object.keys(v).sort().map((k) => v[k]) : [];
				if (!items.length) out += this.nodes(n.els, dot, { ...vars });
				for (const it of items) out += this.nodes(n.body, it, { ...vars });
			}
		}
		return out;
	}
}

// ---- values -------------------------------------------------------------------

export function mergeValues(base, over) {
	if (over === null || typeof over !== "object" || Array.isArray(over)) return over;
	const out = base && typeof base === "object" && !Array.isArray(base) ? { ...base } : {};
	for (const [k, v] of Object.entries(over)) {
		if (v === null) delete out[k];
		else out[k] = mergeValues(out[k], v);
	}
	return out;
}

function readYaml(file) {
	return YAML.parse(fs.readFileSync(file, "utf8")) || {};
}

// Render every template of chartDir. Returns [{ source, text }] in file name
// order (helm sorts by kind; order does not matter to kubectl apply).
export function renderChart(chartDir, { name = "aorta", namespace = "default", valuesFiles = [], set = {} } = {}) {
	const chart = readYaml(path.join(chartDir, "Chart.yaml"));
	let values = readYaml(path.join(chartDir, "values.yaml"));
	for (const f of valuesFiles) values = mergeValues(values, readYaml(f));
	values = mergeValues(values, set);
	const ctx = {
		Values: values,
		Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion },
		Release: { Name: name, Namespace: namespace, Service: "Helm", IsInstall: true, IsUpgrade: false },
		Capabilities: {},
	};
	const tdir = path.join(chartDir, "templates");
	const files = fs.readdirSync(tdir).filter((f) => /\.(ya?ml|tpl)$/.test(f)).sort();
	const defines = {};
	const parsed = {};
	for (const f of files) parsed[f] = parseTemplate(fs.readFileSync(path.join(tdir, f), "utf8"), `templates/${f}`, defines);
	const r = new Renderer(defines);
	const out = [];
	for (const f of files) {
		if (f.startsWith("_")) continue; // partials only define templates
		const text = r.nodes(parsed[f], ctx, { $: ctx });
		if (text.trim()) out.push({ source: `${chart.name}/templates/${f}`, text: text.replace(/^\n+/, "").replace(/\s*$/, "\n") });
	}
	return out;
}

// One template string against a context ({ Values, Chart, Release, ... });
// extra: other template sources whose defines it may include.
export function renderTemplate(src, ctx, extra = []) {
	const defines = {};
	for (const e of extra) parseTemplate(e, "extra", defines);
	const nodes = parseTemplate(src, "template", defines);
	return new Renderer(defines).nodes(nodes, ctx, { $: ctx });
}

// helm template's output format: "---\n# Source: ...\n<text>" per file.
export function formatRendered(rendered) {
	return rendered.map((r) => `---\n# Source: ${r.source}\n${r.text}`).join("");
}

if (import.meta.url === `file://${process.argv[1]}`) {
	const args = process.argv.slice(2);
	const valuesFiles = [];
	let name = "aorta", chartDir = null;
	for (let i = 0; i < args.length; i++) {
		if (args[i] === "-f") valuesFiles.push(args[++i]);
		else if (args[i] === "--name") name = args[++i];
		else chartDir = args[i];
	}
	if (!chartDir) {
		console.error("usage: helm_render.mjs CHART_DIR [-f values.yaml]... [--name RELEASE]");
		process.exit(2);
	}
	process.stdout.write(formatRendered(renderChart(chartDir, { name, valuesFiles })));
}
