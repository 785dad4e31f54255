/* server/commands.h — the `aorta` subcommands. Each takes the arguments after
 * its own name and returns the process exit status (0 ok, 1 runtime failure,
 * 2 usage error). Only main() turns that into an exit. */
#ifndef AORTA_SERVER_COMMANDS_H
#define AORTA_SERVER_COMMANDS_H

int cmd_bench(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_make_model(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_version(int argc, char **argv);

#endif
