// tests/deploy/test_dashboard.mjs — deploy/grafana/aorta.json: a well-formed
// Grafana dashboard (unique panel ids, a 24-column grid without overlaps,
// every query on the $datasource variable, every variable used defined) whose
// PromQL uses only the server's series (api/metrics_text.h, typed by how
// server/info.c emits them) the right way: counters and histogram series
// through rate(), histogram quantiles from _bucket, gauges as they are. Every
// server metric is on the dashboard, and the panels the runbook names exist.
import { Checks, promqlMetrics, read, serverMetrics, seriesNames } from "./lib.mjs";

const c = new Checks("deploy dashboard");
const metrics = serverMetrics();
const series = seriesNames(metrics);
let d;
try {
	d = JSON.parse(read("deploy/grafana/aorta.json"));
} catch (e) {
	c.ok(false, `aorta.json parses: ${e.message}`);
	c.done();
}
c.ok(d.uid && d.title && Number.isInteger(d.schemaVersion), "uid, title and schemaVersion set");
const vars = new Set((d.templating && d.templating.list || []).map((v) => v.name));
c.ok(vars.has("datasource"), "a datasource variable (import picks the Prometheus)");

const panels = d.panels || [];
const ids = panels.map((p) => p.id);
c.eq(new Set(ids).size, ids.length, "panel ids unique");
// grid: within 24 columns, no two panels overlap
const cells = new Map();
for (const p of panels) {
	const g = p.gridPos;
	c.ok(g && g.x >= 0 && g.w > 0 && g.x + g.w <= 24 && g.h > 0, `panel ${p.id} "${p.title}" inside the 24-column grid`);
	for (let x = g.x; x < g.x + g.w; x++)
		for (let y = g.y; y < g.y + g.h; y++) {
			const k = `${x},${y}`;
			if (cells.has(k)) c.ok(false, `panel ${p.id} "${p.title}" overlaps panel ${cells.get(k)}`);
			cells.set(k, p.id);
		}
}

const used = new Set();
const exprs = [];
for (const p of panels.filter((x) => x.type !== "row")) {
	const at = `panel "${p.title}"`;
	c.ok(p.datasource && p.datasource.uid === "${datasource}", `${at} uses $datasource`);
	c.ok(p.targets && p.targets.length, `${at} has queries`);
	const refs = (p.targets || []).map((t) => t.refId);
	c.eq(new Set(refs).size, refs.length, `${at} refIds unique`);
	for (const t of p.targets || []) {
		const e = t.expr;
		exprs.push({ at, e });
		let depth = 0, ok = true;
		for (const ch of e) {
			if ("({[".includes(ch)) depth++;
			if (")}]".includes(ch)) depth--;
			if (depth < 0) ok = false;
		}
		c.ok(ok && depth === 0, `${at}: brackets balance in ${e}`);
		for (const v of e.matchAll(/\$(\w+)/g))
			c.ok(vars.has(v[1]) || v[1].startsWith("__"), `${at}: $${v[1]} is a dashboard variable`);
		for (const m of promqlMetrics(e)) {
			used.add(m);
			if (!c.ok(series.has(m), `${at}: ${m} is a series the server exports`)) continue;
			const base = m.replace(/_(bucket|sum|count)$/, "");
			const type = metrics[m] || metrics[base];
			const inRate = new RegExp(`(rate|increase)\\(${m}\\{[^}]*\\}\\[`).test(e);
			if (type === "gauge") c.ok(!inRate, `${at}: gauge ${m} not in rate()`);
			else c.ok(inRate, `${at}: ${type} series ${m} through rate()`);
			if (m.endsWith("_bucket")) c.ok(/histogram_quantile\(0?\.\d+,\s*sum by \(le\)/.test(e), `${at}: ${m} in histogram_quantile by le`);
		}
	}
}
for (const [n, t] of Object.entries(metrics)) {
	const hit = t === "histogram" ? [...used].some((u) => u.startsWith(n + "_")) : used.has(n);
	c.ok(hit, `dashboard shows ${n}`);
}
const has = (re, what) => c.ok(exprs.some(({ e }) => re.test(e)), `dashboard has ${what}`);
has(/histogram_quantile\(0\.99, sum by \(le\) \(rate\(aorta:time_to_first_token_seconds_bucket/, "TTFT p99");
has(/histogram_quantile\(0\.5, sum by \(le\) \(rate\(aorta:inter_token_latency_seconds_bucket/, "ITL p50");
has(/rate\(aorta:generation_tokens_total[^/]*$/, "generation throughput");
has(/aorta:prefix_cache_hits_total[^/]*\/[^/]*aorta:prefix_cache_queries_total/, "prefix-cache hit rate (hits / queries)");
has(/aorta:kv_cache_usage_perc/, "KV usage");
has(/aorta:num_requests_waiting/, "queue length");
has(/rate\(aorta:num_preemptions_total/, "preemption rate");
c.done();
