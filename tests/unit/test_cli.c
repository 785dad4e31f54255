/* tests/unit/test_cli.c — server/cli.c flag parsing and serve config validation. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "server/cli.h"
#include "server/config.h"

struct fixture {
	const char *s;
	int i;
	double d;
	bool b;
	uint64_t bytes;
	struct cli_opt opts[5];
	struct cli_cmd cmd;
};

static void fixture_init(struct fixture *f)
{
	memset(f, 0, sizeof *f);
	f->b = true;
	f->opts[0] = (struct cli_opt){ "model", CLI_STR, &f->s, "PATH", "model" };
	f->opts[1] = (struct cli_opt){ "max-num-seqs", CLI_INT, &f->i, "N", "seqs" };
	f->opts[2] = (struct cli_opt){ "ratio", CLI_DOUBLE, &f->d, "F", "ratio" };
	f->opts[3] = (struct cli_opt){ "enable-prefix-caching", CLI_BOOL, &f->b, NULL, "pc" };
	f->opts[4] = (struct cli_opt){ "kv-cache-memory", CLI_BYTES, &f->bytes, "BYTES", "kv" };
	f->cmd = (struct cli_cmd){ .name = "t", .summary = "test", .usage = "aorta t",
				   .opts = f->opts, .n_opts = 5, .max_positional = 1 };
}

static int parse(struct fixture *f, int argc, char **argv, const char **pos, int *n_pos)
{
	FILE *null = fopen("/dev/null", "w");
	int rc = cli_parse(&f->cmd, argc, argv, pos, n_pos, null, null);
	fclose(null);
	return rc;
}

START_TEST(test_parse_forms)
{
	struct fixture f;
	fixture_init(&f);
	char *argv[] = { "--model", "m.gguf", "--max-num-seqs=12", "--ratio", "0.5",
			 "--no-enable-prefix-caching", "--kv-cache-memory", "2G", "pos" };
	const char *pos[1];
	int n_pos;
	ck_assert_int_eq(parse(&f, 9, argv, pos, &n_pos), CLI_OK);
	ck_assert_str_eq(f.s, "m.gguf");
	ck_assert_int_eq(f.i, 12);
	ck_assert(f.d == 0.5);
	ck_assert(!f.b);
	ck_assert_uint_eq(f.bytes, 2ull << 30);
	ck_assert_int_eq(n_pos, 1);
	ck_assert_str_eq(pos[0], "pos");
	char *argv2[] = { "--enable-prefix-caching=false", "--enable-prefix-caching" };
	ck_assert_int_eq(parse(&f, 2, argv2, pos, &n_pos), CLI_OK);
	ck_assert(f.b);
}
END_TEST

START_TEST(test_parse_errors)
{
	struct fixture f;
	fixture_init(&f);
	const char *pos[1];
	int n_pos;
	char *unknown[] = { "--modle", "x" };
	ck_assert_int_eq(parse(&f, 2, unknown, pos, &n_pos), CLI_ERROR);
	char *shortflag[] = { "-m" };
	ck_assert_int_eq(parse(&f, 1, shortflag, pos, &n_pos), CLI_ERROR);
	char *missing[] = { "--model" };
	ck_assert_int_eq(parse(&f, 1, missing, pos, &n_pos), CLI_ERROR);
	char *badint[] = { "--max-num-seqs", "12x" };
	ck_assert_int_eq(parse(&f, 2, badint, pos, &n_pos), CLI_ERROR);
	char *hugeint[] = { "--max-num-seqs", "99999999999" };
	ck_assert_int_eq(parse(&f, 2, hugeint, pos, &n_pos), CLI_ERROR);
	char *nan[] = { "--ratio", "nan" };
	ck_assert_int_eq(parse(&f, 2, nan, pos, &n_pos), CLI_ERROR);
	char *too_many[] = { "a", "b" };
	ck_assert_int_eq(parse(&f, 2, too_many, pos, &n_pos), CLI_ERROR);
	char *neg_value[] = { "--no-model" };
	ck_assert_int_eq(parse(&f, 1, neg_value, pos, &n_pos), CLI_ERROR);
	char *help[] = { "--help" };
	ck_assert_int_eq(parse(&f, 1, help, pos, &n_pos), CLI_HELP);
}
END_TEST

START_TEST(test_bytes)
{
	uint64_t b;
	ck_assert_int_eq(cli_parse_bytes("512", &b), 0);
	ck_assert_uint_eq(b, 512);
	ck_assert_int_eq(cli_parse_bytes("1k", &b), 0);
	ck_assert_uint_eq(b, 1024);
	ck_assert_int_eq(cli_parse_bytes("1.5MB", &b), 0);
	ck_assert_uint_eq(b, 1500000);
	ck_assert_int_eq(cli_parse_bytes("2GiB", &b), 0);
	ck_assert_uint_eq(b, 2ull << 30);
	ck_assert_int_eq(cli_parse_bytes("-1", &b), -1);
	ck_assert_int_eq(cli_parse_bytes("12Q", &b), -1);
	ck_assert_int_eq(cli_parse_bytes("", &b), -1);
	ck_assert_int_eq(cli_parse_bytes("1e30", &b), -1);
}
END_TEST

START_TEST(test_config_validate)
{
	struct srv_config c;
	srv_config_defaults(&c);
	FILE *null = fopen("/dev/null", "w");
	ck_assert_int_eq(srv_config_validate(&c, null), -1); /* no model */
	c.model = "demo.gguf";
	ck_assert_int_eq(srv_config_validate(&c, null), 0);
	c.block_size = 24; /* not a power of two */
	ck_assert_int_eq(srv_config_validate(&c, null), -1);
	c.block_size = 16;
	c.device = "tpu";
	ck_assert_int_eq(srv_config_validate(&c, null), -1);
	c.device = "cpu";
	c.gpu_memory_utilization = 1.5;
	ck_assert_int_eq(srv_config_validate(&c, null), -1);
	fclose(null);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cli");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_parse_forms);
	tcase_add_test(tc, test_parse_errors);
	tcase_add_test(tc, test_bytes);
	tcase_add_test(tc, test_config_validate);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
