// tests/deploy/test_manifests.mjs — validates deploy/kubernetes/*.yaml and the
// chart deploy/helm/aorta rendered with several value sets against the
// Kubernetes (and Prometheus Operator) API schemas, strictly (unknown fields
// fail), then checks the values that must agree with the server itself:
// flags against `aorta serve --help`, probe paths against server/routes.c's
// routes, grace period against --shutdown-timeout, metric names against
// api/metrics_text.h, and the HPA against the prometheus-adapter rule.
// Also checks that the plain manifests equal the chart's render.
import fs from "node:fs";
import path from "node:path";
import { renderChart } from "./helm_render.mjs";
import { PLAIN, expected } from "./gen_manifests.mjs";
import {
	Checks, CHART, DEPLOY, METRIC_MACRO, argPairs, promqlMetrics, read, selects, serveFlags,
	serverMetrics, serverRoutes, seriesNames, stuckAfterSeconds, validateObject, yamlDocs,
} from "./lib.mjs";

const c = new Checks("deploy manifests");
const metrics = serverMetrics();
const series = seriesNames(metrics);
const { flags, defaults } = serveFlags();
const routes = serverRoutes();
const waiting = METRIC_MACRO("API_M_REQUESTS_WAITING");
const adapter = yamlDocs(read("deploy/kubernetes/prometheus-adapter-values.yaml"), "prometheus-adapter-values.yaml")[0];
const dockerUid = (() => {
	const m = /^USER\s+(\d+)/m.exec(read("deploy/docker/Dockerfile.cuda"));
	return m ? Number(m[1]) : null;
})();

// the validator itself must reject what the API server would: a typo'd
// field, a wrong type (so a pass below means something)
{
	const bad = { apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "x" }, spec: { replicas: "2", selector: { matchLabels: { a: "b" } },
		template: { metadata: { labels: { a: "b" } }, spec: { containers: [{ name: "a", image: "b", readinesProbe: {} }] } } } };
	const errs = await validateObject(bad);
	c.ok(errs.some((e) => /replicas must be integer/.test(e)), "validator rejects a wrong type");
	c.ok(errs.some((e) => /unknown field "readinesProbe"/.test(e)), "validator rejects an unknown field");
}

c.ok(routes["/health"] && routes["/health"].isPublic, "server/routes.c has a public GET /health");
c.ok(routes["/metrics"], "server/routes.c has GET /metrics");

// ---- the adapter rule: reads the real gauge, serves the HPA's name -----------
const rule = adapter.rules && adapter.rules.custom && adapter.rules.custom[0];
c.ok(rule, "prometheus-adapter-values.yaml has a custom rule");
const adapterName = rule && rule.name && rule.name.as;
if (rule) {
	c.eq(promqlMetrics(rule.seriesQuery), [waiting], "adapter seriesQuery reads API_M_REQUESTS_WAITING");
	c.eq(metrics[waiting], "gauge", `${waiting} is a gauge (no rate() in the adapter rule)`);
	c.ok(new RegExp(rule.name.matches).test(waiting), "adapter name.matches matches the metric");
	c.eq(adapterName, waiting.replace(/:/g, "_"), "adapter serves the metric as its name with ':' -> '_'");
	c.ok(/\bnamespace\b/.test(rule.seriesQuery) && rule.resources.overrides.pod, "adapter maps namespace and pod labels");
	c.ok(!/rate\(/.test(rule.metricsQuery), "adapter metricsQuery takes the gauge as is");
}

// ---- one rendered set of objects --------------------------------------------
async function checkSet(label, objs, opts) {
	const at = (o) => `${label}: ${o.kind}/${o.metadata && o.metadata.name}`;
	for (const o of objs) {
		const errs = await validateObject(o);
		c.ok(errs.length === 0, `${at(o)} valid against the API schema${errs.length ? ": " + errs.join("; ") : ""}`);
	}
	const by = (k) => objs.filter((o) => o.kind === k);
	const [dep] = by("Deployment");
	const [svc] = by("Service");
	if (!c.ok(dep && svc, `${label}: has a Deployment and a Service`)) return;
	const pod = dep.spec.template;
	const podLabels = pod.metadata.labels;
	c.ok(selects(dep.spec.selector.matchLabels, podLabels), `${label}: Deployment selector matches its pods`);
	const ctr = pod.spec.containers.find((x) => x.name === "aorta");
	if (!c.ok(ctr, `${label}: container "aorta"`)) return;

	// flags: each one exists in `aorta serve --help`, values that matter are right
	const args = argPairs(ctr.args || []);
	c.ok(!(ctr.command && ctr.command.length), `${label}: no command override (the image's ENTRYPOINT is aorta serve)`);
	for (const [f] of args) c.ok(flags.has(f), `${label}: flag ${f} is an aorta serve flag`);
	const arg = (f) => { const p = args.find(([k]) => k === f); return p ? p[1] : undefined; };
	c.eq(arg("--host"), "0.0.0.0", `${label}: listens on all interfaces`);
	const port = Number(arg("--port") || defaults["--port"]);
	const cport = (ctr.ports || []).find((p) => p.name === "http");
	c.ok(cport && cport.containerPort === port, `${label}: containerPort http = --port (${port})`);
	c.ok((arg("--model") || "").startsWith("/models/"), `${label}: --model under /models`);
	c.ok(!arg("--api-key"), `${label}: the key is not a command-line argument (visible in ps)`);
	c.eq(arg("--device"), opts.variant, `${label}: --device`);

	// API key from a Secret, the env name the server reads
	const env = (ctr.env || []).find((e) => e.name === "AORTA_API_KEY");
	c.ok(/getenv\("AORTA_API_KEY"\)/.test(read("server/cmd_serve.c")), "server reads $AORTA_API_KEY");
	const keyRef = env && env.valueFrom && env.valueFrom.secretKeyRef;
	c.ok(keyRef && keyRef.name && keyRef.key && env.value === undefined, `${label}: AORTA_API_KEY from a secretKeyRef`);

	// probes: /health on the http port, sized for the server's behaviour
	for (const pn of ["startupProbe", "readinessProbe", "livenessProbe"]) {
		const p = ctr[pn];
		if (!c.ok(p && p.httpGet, `${label}: ${pn} is an httpGet`)) continue;
		c.eq(p.httpGet.path, "/health", `${label}: ${pn} path`);
		c.ok(p.httpGet.port === "http" || p.httpGet.port === port, `${label}: ${pn} port is the server port`);
	}
	const window = (p) => (p.periodSeconds || 10) * (p.failureThreshold || 3);
	if (ctr.startupProbe) c.ok(window(ctr.startupProbe) >= 600, `${label}: startup probe allows >= 10 min for a model load (${window(ctr.startupProbe)} s)`);
	if (ctr.readinessProbe) c.ok(window(ctr.readinessProbe) <= 15, `${label}: readiness drops a draining/stuck pod within 15 s (${window(ctr.readinessProbe)} s)`);
	if (ctr.livenessProbe) {
		const lw = window(ctr.livenessProbe);
		const total = stuckAfterSeconds() + lw;
		c.ok(total <= 180, `${label}: a stuck engine is restarted within 3 min (${stuckAfterSeconds()} s + ${lw} s)`);
		c.ok(lw >= 20, `${label}: liveness tolerates a few slow /health answers (${lw} s)`);
	}

	// drain: preStop sleep, then SIGTERM and --shutdown-timeout, inside the grace period
	const shutdown = Number(arg("--shutdown-timeout") || defaults["--shutdown-timeout"]);
	c.ok(Number.isFinite(shutdown), `${label}: --shutdown-timeout known (${shutdown})`);
	const pre = ctr.lifecycle && ctr.lifecycle.preStop && ctr.lifecycle.preStop.exec && ctr.lifecycle.preStop.exec.command;
	c.ok(pre && pre[0] === "sleep", `${label}: preStop sleeps`);
	const preS = pre ? Number(pre[1]) : 0;
	c.ok(preS >= 5, `${label}: preStop sleep >= 5 s so endpoints drop the pod before SIGTERM (${preS})`);
	const grace = pod.spec.terminationGracePeriodSeconds;
	c.ok(grace >= preS + shutdown + 5, `${label}: terminationGracePeriodSeconds ${grace} >= preStop ${preS} + --shutdown-timeout ${shutdown} + 5`);
	const ru = dep.spec.strategy && dep.spec.strategy.rollingUpdate;
	c.ok(ru && ru.maxUnavailable === 0, `${label}: rollouts surge before removing a pod (maxUnavailable 0)`);

	// model volume read-only from a PVC
	const vm = (ctr.volumeMounts || []).find((v) => v.mountPath === "/models");
	c.ok(vm && vm.readOnly === true, `${label}: /models mounted read-only`);
	const vol = vm && pod.spec.volumes.find((v) => v.name === vm.name);
	c.ok(vol && vol.persistentVolumeClaim && vol.persistentVolumeClaim.claimName, `${label}: /models from a PVC`);
	const pvcs = by("PersistentVolumeClaim");
	if (opts.pvc) c.ok(pvcs.some((p) => p.metadata.name === vol.persistentVolumeClaim.claimName), `${label}: the example PVC is the one mounted`);
	else c.eq(pvcs.length, 0, `${label}: no PVC when an existing claim is used`);

	// security: the image's non-root uid
	const sc = pod.spec.securityContext || {};
	c.ok(sc.runAsNonRoot === true, `${label}: runAsNonRoot`);
	c.eq(sc.runAsUser, dockerUid, `${label}: runAsUser = the Dockerfiles' USER`);
	c.ok(ctr.securityContext && ctr.securityContext.readOnlyRootFilesystem, `${label}: read-only root filesystem`);

	// resources by variant
	const gpuReq = (ctr.resources.limits || {})["nvidia.com/gpu"];
	if (opts.variant === "cuda") c.ok(Number(gpuReq) >= 1, `${label}: requests nvidia.com/gpu`);
	else c.ok(gpuReq === undefined && ctr.resources.requests && ctr.resources.requests.cpu, `${label}: CPU requests, no GPU`);
	if (opts.variant === "cpu") {
		const req = String(ctr.resources.requests.cpu);
		c.ok(/^\d+$/.test(req) && arg("--threads") === req, `${label}: --threads (${arg("--threads")}) = the CPU request (${req}), not the node's core count`);
	}
	c.ok(ctr.image.endsWith(`-${opts.variant}`), `${label}: image tag is the ${opts.variant} variant (${ctr.image})`);

	// Service
	c.ok(selects(svc.spec.selector, podLabels), `${label}: Service selects the pods`);
	const sp = svc.spec.ports.find((p) => p.name === "http");
	c.ok(sp && (sp.targetPort === "http" || sp.targetPort === port), `${label}: Service targets the http port`);

	// PDB
	const [pdb] = by("PodDisruptionBudget");
	if (c.ok(pdb, `${label}: PodDisruptionBudget`)) {
		c.ok(selects(pdb.spec.selector.matchLabels, podLabels), `${label}: PDB selects the pods`);
		c.ok(pdb.spec.maxUnavailable >= 1, `${label}: PDB lets a single-replica pod be drained (maxUnavailable >= 1)`);
	}

	// HPA
	const [hpa] = by("HorizontalPodAutoscaler");
	if (opts.hpa) {
		if (c.ok(hpa, `${label}: HorizontalPodAutoscaler`)) {
			c.eq([hpa.spec.scaleTargetRef.kind, hpa.spec.scaleTargetRef.name], ["Deployment", dep.metadata.name], `${label}: HPA targets the Deployment`);
			const m = hpa.spec.metrics.find((x) => x.type === "Pods");
			c.ok(m, `${label}: HPA has a Pods metric`);
			if (m) c.eq(m.pods.metric.name, adapterName, `${label}: HPA metric is the adapter's name for ${waiting}`);
			c.ok(dep.spec.replicas === undefined, `${label}: Deployment leaves replicas to the HPA`);
		}
	} else {
		c.ok(!hpa, `${label}: no HPA when autoscaling is off`);
		c.ok(dep.spec.replicas >= 1, `${label}: fixed replica count`);
	}

	// ServiceMonitor: scrapes /metrics with the same key as the server
	const [sm] = by("ServiceMonitor");
	if (c.ok(sm, `${label}: ServiceMonitor`)) {
		c.ok(selects(sm.spec.selector.matchLabels, svc.metadata.labels), `${label}: ServiceMonitor selects the Service`);
		const ep = sm.spec.endpoints[0];
		c.ok(svc.spec.ports.some((p) => p.name === ep.port), `${label}: ServiceMonitor port names a Service port`);
		c.eq(ep.path, "/metrics", `${label}: ServiceMonitor path`);
		if (!routes["/metrics"].isPublic) {
			const cr = ep.authorization && ep.authorization.credentials;
			c.ok(ep.authorization && ep.authorization.type === "Bearer" && cr && keyRef && cr.name === keyRef.name && cr.key === keyRef.key,
				`${label}: /metrics needs the key, the scrape sends the server's Secret as a bearer token`);
		}
	}

	// PrometheusRule: every aorta:* series exists; job is the Service's name
	const [pr] = by("PrometheusRule");
	if (c.ok(pr, `${label}: PrometheusRule`)) {
		const rules = pr.spec.groups.flatMap((g) => g.rules);
		c.ok(rules.length >= 5, `${label}: at least 5 alerts`);
		for (const r of rules) {
			for (const m of promqlMetrics(r.expr)) c.ok(series.has(m), `${label}: alert ${r.alert} uses a real series (${m})`);
			for (const j of r.expr.matchAll(/job="([^"]+)"/g)) c.eq(j[1], svc.metadata.name, `${label}: alert ${r.alert} job label = Service name`);
			c.ok(/^\d+[smh]$/.test(r.for || ""), `${label}: alert ${r.alert} has a 'for'`);
			const readme = read("deploy/README.md");
			c.ok(readme.includes(r.alert), `${label}: deploy/README.md explains ${r.alert}`);
		}
	}

	// Secret, when the chart creates it
	const [sec] = by("Secret");
	if (opts.secret) c.ok(sec && keyRef && sec.metadata.name === keyRef.name && sec.stringData && sec.stringData[keyRef.key], `${label}: chart-made Secret holds the key the pod reads`);
	else c.ok(!sec, `${label}: no Secret in the output (the key is created out of band)`);
}

const flat = (rendered) => rendered.flatMap((r) => yamlDocs(r.text, r.source));

// plain manifests, and that they are the chart's render
for (const p of PLAIN) {
	const f = path.join(DEPLOY, "kubernetes", p.file);
	const text = fs.existsSync(f) ? fs.readFileSync(f, "utf8") : "";
	c.ok(text === expected(p), `deploy/kubernetes/${p.file} equals the chart's render (regenerate: node tests/deploy/gen_manifests.mjs)`);
	await checkSet(`kubernetes/${p.file}`, yamlDocs(text, p.file), { variant: p.file.includes("cpu") ? "cpu" : "cuda", pvc: true, hpa: true, secret: false });
}

// the chart with other values: every optional branch of the templates
await checkSet("chart (options)", flat(renderChart(CHART, {
	name: "prod",
	set: {
		replicaCount: 2,
		autoscaling: { enabled: false },
		apiKey: { value: "test-key", secretKey: "token" },
		model: { existingClaim: "llama-weights", servedModelName: "llama-3-8b", file: "llama/model.gguf" },
		server: { shutdownTimeoutSeconds: 300, extraArgs: ["--max-model-len", "8192", "--max-num-seqs", "128"] },
		nodeSelector: { "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3" },
		image: { tag: "custom-cuda" },
	},
})), { variant: "cuda", pvc: false, hpa: false, secret: true });
{
	const objs = flat(renderChart(CHART, { name: "prod", set: { model: { pvc: { storageClassName: "fast-rwx" } }, metrics: { serviceMonitor: { enabled: false }, prometheusRule: { enabled: false } }, podDisruptionBudget: { enabled: false } } }));
	c.ok(!objs.some((o) => ["ServiceMonitor", "PrometheusRule", "PodDisruptionBudget"].includes(o.kind)), "chart: monitoring and PDB can be turned off");
	const pvc = objs.find((o) => o.kind === "PersistentVolumeClaim");
	c.ok(pvc && pvc.spec.storageClassName === "fast-rwx", "chart: PVC storage class from values");
	const dep = objs.find((o) => o.kind === "Deployment");
	c.eq(dep.metadata.name, "prod-aorta", "chart: fullname is <release>-aorta");
}

// the chart's appVersion is the server's version
{
	const chart = yamlDocs(read("deploy/helm/aorta/Chart.yaml"), "Chart.yaml")[0];
	const m = /project\('aorta',[\s\S]*?version\s*:\s*'([^']+)'/.exec(read("meson.build"));
	c.eq(chart.appVersion, m && m[1], "Chart appVersion = meson.build project version");
}

c.done();
