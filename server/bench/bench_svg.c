/* server/bench/bench_svg.c — a small self-written SVG line plot for `aorta bench
 * sweep`: end-to-end latency (p50 and p99, ms) against output token
 * throughput (tok/s), one labelled point per swept rate or concurrency.
 * Axes start at zero with "nice" ticks (1, 2, 5 x 10^k). No dependencies.
 * Tested in tests/bench_serve/test_bench_e2e.c (the sweep writes one). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_serve.h"

#define W  800
#define H  500
#define ML 80 /* margins: left, right, top, bottom */
#define MR 30
#define MT 50
#define MB 60

static void xml_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '&':
			fputs("&amp;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			if ((unsigned char)*s >= 0x20)
				fputc(*s, f);
		}
	}
}

/* A tick step near range/5 of the form {1,2,5} x 10^k. */
static double nice_step(double range)
{
	if (!(range > 0) || !isfinite(range))
		return 1;
	double raw = range / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
	return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
}

static void series(FILE *f, const struct bench_sweep_point *p, int n, double sx, double sy,
                   bool p99, const char *color)
{
	fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
	for (int i = 0; i < n; i++)
		fprintf(f, "%.1f,%.1f ", ML + p[i].x * sx,
		        H - MB - (p99 ? p[i].y_p99 : p[i].y_p50) * sy);
	fprintf(f, "\"/>\n");
	for (int i = 0; i < n; i++) {
		double x = ML + p[i].x * sx, y = H - MB - (p99 ? p[i].y_p99 : p[i].y_p50) * sy;
		fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", x, y, color);
		if (p99) {
			fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", x + 6, y - 6);
			xml_text(f, p[i].label);
			fprintf(f, "</text>\n");
		}
	}
}

int bench_svg_write(const char *path, const char *title, const struct bench_sweep_point *pts, int n,
                    struct diag *d)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return diag_set(d, ERR_IO, "%s: cannot open for writing", path);
	double xmax = 0, ymax = 0;
	for (int i = 0; i < n; i++) {
		if (pts[i].x > xmax)
			xmax = pts[i].x;
		if (pts[i].y_p99 > ymax)
			ymax = pts[i].y_p99;
		if (pts[i].y_p50 > ymax)
			ymax = pts[i].y_p50;
	}
	double xs = nice_step(xmax), ys = nice_step(ymax);
	xmax = xmax > 0 ? ceil(xmax * 1.05 / xs) * xs : 1;
	ymax = ymax > 0 ? ceil(ymax * 1.05 / ys) * ys : 1;
	double sx = (W - ML - MR) / xmax, sy = (H - MT - MB) / ymax;
	fprintf(f,
	        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
	        "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
	        W, H, W, H);
	fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"16\" text-anchor=\"middle\">", W / 2);
	xml_text(f, title);
	fprintf(f, "</text>\n");
	/* grid and tick labels */
	for (double v = 0; v <= xmax + xs * 1e-9; v += xs) {
		double x = ML + v * sx;
		fprintf(
		    f,
		    "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n"
		    "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n",
		    x, MT, x, H - MB, x, H - MB + 16, v);
	}
	for (double v = 0; v <= ymax + ys * 1e-9; v += ys) {
		double y = H - MB - v * sy;
		fprintf(
		    f,
		    "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
		    "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n",
		    ML, y, W - MR, y, ML - 6, y + 4, v);
	}
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", ML, H - MB,
	        W - MR, H - MB);
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", ML, MT, ML,
	        H - MB);
	fprintf(f,
	        "<text x=\"%d\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\">"
	        "output token throughput (tok/s)</text>\n",
	        (W + ML - MR) / 2, H - 18);
	fprintf(f,
	        "<text x=\"18\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\" "
	        "transform=\"rotate(-90 18 %d)\">end-to-end latency (ms)</text>\n",
	        (H + MT - MB) / 2, (H + MT - MB) / 2);
	series(f, pts, n, sx, sy, false, "#1f77b4");
	series(f, pts, n, sx, sy, true, "#d62728");
	fprintf(f,
	        "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#1f77b4\"/>"
	        "<text x=\"%d\" y=\"%d\" font-size=\"12\">p50</text>\n"
	        "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#d62728\"/>"
	        "<text x=\"%d\" y=\"%d\" font-size=\"12\">p99</text>\n",
	        ML + 10, MT + 4, ML + 28, MT + 14, ML + 10, MT + 22, ML + 28, MT + 32);
	if (n == 0)
		fprintf(f,
		        "<text x=\"%d\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\">"
		        "no successful points</text>\n",
		        W / 2, H / 2);
	fprintf(f, "</svg>\n");
	return fclose(f) == 0 ? 0 : diag_set(d, ERR_IO, "%s: write failed", path);
}
