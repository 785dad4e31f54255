// tests/deploy/test_helm_render.mjs — the chart renderer (helm_render.mjs)
// against Go text/template + Sprig semantics on small templates: trim
// markers, if / else if / else, with, range over lists and maps, define and
// include with nindent, variables and $, parenthesized pipelines, the
// functions the chart uses, values merging, and loud errors for what it does
// not implement. The expected strings are what helm 3 prints for the same
// input (Go's rules: trim eats all adjacent whitespace, maps range in key
// order, toYaml sorts keys and drops the trailing newline).
import { renderTemplate, mergeValues } from "./helm_render.mjs";
import { Checks } from "./lib.mjs";

const c = new Checks("helm_render");
const ctx = (Values) => ({ Values, Chart: { Name: "aorta", AppVersion: "1.2.3" }, Release: { Name: "rel", Namespace: "ns" } });
const r = (src, values = {}, extra = []) => renderTemplate(src, ctx(values), extra);
const eq = (src, values, want, what, extra) => {
	let got;
	try {
		got = r(src, values, extra);
	} catch (e) {
		got = `ERROR ${e.message}`;
	}
	c.eq(got, want, what);
};
const throws = (src, values, re, what) => {
	let msg = null;
	try {
		r(src, values);
	} catch (e) {
		msg = e.message;
	}
	c.ok(msg !== null && re.test(msg), `${what} (${msg})`);
};

eq("a  {{- 1 -}}  \n b", {}, "a1b", "trim markers eat whitespace and newlines on both sides");
eq("a {{ 1 }} b", {}, "a 1 b", "no trim without markers");
eq("{{/* comment */}}x", {}, "x", "comments print nothing");
eq("{{ .Values.a.b }}", { a: { b: "v" } }, "v", "field chain");
eq("{{ if .Values.x }}yes{{ else }}no{{ end }}", { x: 0 }, "no", "0 is false");
eq("{{ if .Values.x }}yes{{ else }}no{{ end }}", { x: [] }, "no", "empty list is false");
eq("{{ if .Values.x }}yes{{ else }}no{{ end }}", { x: "0" }, "yes", "non-empty string is true");
const chain = "{{ if eq .Values.v \"a\" }}A{{ else if eq .Values.v \"b\" }}B{{ else }}C{{ end }}";
eq(chain, { v: "a" }, "A", "if branch");
eq(chain, { v: "b" }, "B", "else if branch");
eq(chain, { v: "z" }, "C", "else branch");
eq("{{ with .Values.m }}{{ .k }}{{ else }}none{{ end }}", { m: { k: 1 } }, "1", "with rebinds dot");
eq("{{ with .Values.m }}{{ .k }}{{ else }}none{{ end }}", { m: {} }, "none", "with else on empty");
eq("{{ range .Values.l }}[{{ . }}]{{ end }}", { l: [1, 2, 3] }, "[1][2][3]", "range list");
eq("{{ range .Values.m }}{{ . }},{{ end }}", { m: { b: 2, a: 1 } }, "1,2,", "range map in key order");
eq("{{ range .Values.l }}x{{ else }}empty{{ end }}", { l: [] }, "empty", "range else");
eq("{{ with .Values.m }}{{ $.Release.Name }}{{ end }}", { m: { k: 1 } }, "rel", "$ is the root inside with");
eq("{{- $x := .Values.a -}}{{ $x.b }}", { a: { b: 7 } }, "7", "variable declaration and field");
eq("{{ .Values.t | default (printf \"%s-%s\" .Chart.AppVersion \"cpu\") }}", { t: "" }, "1.2.3-cpu", "default with a parenthesized pipeline");
eq("{{ .Values.t | default \"d\" }}", { t: "set" }, "set", "default keeps a set value");
eq("{{ .Values.p | quote }}", { p: 8080 }, "\"8080\"", "quote a number");
eq("{{ \"ab-\" | trimSuffix \"-\" }}|{{ \"abcdef\" | trunc 3 }}", {}, "ab|abc", "trimSuffix, trunc");
eq("{{ add 1 2 3 }} {{ mul 2 4 }}", {}, "6 8", "add, mul");
eq("{{ contains \"or\" \"aorta\" }} {{ not true }} {{ and 1 0 }} {{ or 0 \"x\" }}", {}, "true false 0 x", "contains, not, and, or");
eq("k:{{ toYaml .Values.m | nindent 2 }}", { m: { b: 1, a: [1, "x"] } }, "k:\n  a:\n  - 1\n  - x\n  b: 1", "toYaml sorts keys, go-yaml list style, nindent");
eq("{{ \"{{\" }} x {{ \"}}\" }}", {}, "{{ x }}", "braces as string literals");
eq("{{ include \"t\" . | nindent 2 }}", { v: "q" }, "\n  a: q\n  b: 1",
	"define + include with the context", ["{{- define \"t\" -}}\na: {{ .Values.v }}\nb: 1\n{{- end -}}"]);
throws("{{ .Values.nope }}", {}, /no value/, "printing a missing value fails");
throws("{{ lower \"A\" }}", {}, /not supported/, "unsupported function fails");
throws("{{ if 1 }}x", {}, /missing \{\{ end \}\}/, "missing end fails");
throws("{{ 1 ", {}, /unclosed/, "unclosed action fails");
throws("{{ toString .Values.m }}", { m: { a: 1 } }, /cannot print a map/, "printing a map fails");

c.eq(mergeValues({ a: { b: 1, c: 2 }, l: [1, 2], d: 1 }, { a: { c: 3 }, l: [9], d: null }), { a: { b: 1, c: 3 }, l: [9] },
	"values merge: maps merge, lists replace, null deletes");
c.done();
