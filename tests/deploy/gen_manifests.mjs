// tests/deploy/gen_manifests.mjs — deploy/kubernetes/aorta-{cuda,cpu}.yaml are
// the Helm chart rendered (release "aorta", helm_render.mjs) with its default
// values and with ci/cpu-values.yaml, so the plain manifests and the chart
// cannot drift. `node gen_manifests.mjs` rewrites them; `--check` (the test)
// fails if a committed file differs from a fresh render.
import fs from "node:fs";
import path from "node:path";
import { renderChart, formatRendered } from "./helm_render.mjs";
import { CHART, DEPLOY } from "./lib.mjs";

export const PLAIN = [
	{ file: "aorta-cuda.yaml", values: [], what: "CUDA image, one GPU per replica" },
	{ file: "aorta-cpu.yaml", values: [path.join(CHART, "ci", "cpu-values.yaml")], what: "CPU-only image" },
];

export function expected(p) {
	const head = `# deploy/kubernetes/${p.file} — aorta, ${p.what}: Deployment, Service,\n` +
		"# PodDisruptionBudget, HorizontalPodAutoscaler, model PVC (example),\n" +
		"# ServiceMonitor and PrometheusRule. GENERATED from deploy/helm/aorta by\n" +
		"# tests/deploy/gen_manifests.mjs; edit the chart and regenerate, not this file.\n" +
		"# Needs the API-key Secret first (deploy/README.md):\n" +
		"#   kubectl create secret generic aorta-api-key --from-literal=api-key=\"$(openssl rand -hex 32)\"\n";
	return head + formatRendered(renderChart(CHART, { name: "aorta", valuesFiles: p.values }));
}

if (import.meta.url === `file://${process.argv[1]}`) {
	const check = process.argv.includes("--check");
	let bad = 0;
	for (const p of PLAIN) {
		const f = path.join(DEPLOY, "kubernetes", p.file);
		const want = expected(p);
		if (check) {
			const got = fs.existsSync(f) ? fs.readFileSync(f, "utf8") : "";
			if (got !== want) {
				console.log(`FAIL deploy/kubernetes/${p.file} differs from the chart's render; run: node tests/deploy/gen_manifests.mjs`);
				bad++;
			} else console.log(`ok deploy/kubernetes/${p.file} equals the chart rendered with ${p.values.length ? p.values.map((v) => path.basename(v)).join(", ") : "default values"}`);
		} else {
			fs.writeFileSync(f, want);
			console.log(`wrote ${f}`);
		}
	}
	process.exit(bad ? 1 : 0);
}
