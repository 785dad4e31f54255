/* server/bench/cmd_bench.c — `aorta bench SUBCOMMAND`: dispatch on the second
 * word to the engine bench (bench_engine.c) or the benchmark client
 * (bench_serve.c: serve and sweep). */
#include <stdio.h>
#include <string.h>

#include "server/bench/bench_serve.h"
#include "server/commands.h"

int cmd_bench(int argc, char **argv)
{
	if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
		FILE *out = argc < 1 ? stderr : stdout;
		fprintf(out, "Usage: aorta bench engine [options]   benchmark the engine alone\n"
			     "       aorta bench serve [options]    measure a server under load\n"
			     "       aorta bench sweep [options]    serve over rates/concurrencies\n"
			     "Run 'aorta bench engine --help' for its options.\n");
		return argc < 1 ? 2 : 0;
	}
	if (!strcmp(argv[0], "engine"))
		return bench_engine_main(argc - 1, argv + 1);
	if (!strcmp(argv[0], "serve")) /* issue 8: server/bench/bench_serve.h */
		return bench_serve_main(argc - 1, argv + 1);
	if (!strcmp(argv[0], "sweep"))
		return bench_sweep_main(argc - 1, argv + 1);
	fprintf(stderr, "aorta bench: unknown benchmark '%s'\n", argv[0]);
	return 2;
}
