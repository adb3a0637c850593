/* How an agent runs a program that is not Lua: the interpreter given, the #! line (read
 * as the kernel does, so the file need not be executable), the file itself, python3 for
 * a .py file, or a command from PATH; and the errors when none applies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent.h"

static char dir[] = "/tmp/ds_agent_program_XXXXXX";
static char *const ARGS[] = {"--lr", "3e-4"};

static void put(const char *name, const char *text, int mode) {
    FILE *f = fopen(name, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(name, (mode_t)mode);
}

/* The argv for program, as one string with words joined by '|'. */
static const char *argv_of(char *const *interp, int ninterp, const char *program, ds_err *err) {
    static char joined[1024];
    char **v = ds_agent_program_argv(interp, ninterp, program, ARGS, 2, err);
    if (!v) return NULL;
    joined[0] = '\0';
    for (int i = 0; v[i]; i++) {
        strcat(joined, i ? "|" : "");
        strcat(joined, v[i]);
    }
    ds_agent_free_words(v);
    return joined;
}

static int setup(void **st) {
    (void)st;
    if (!mkdtemp(dir) || chdir(dir) != 0) return -1;
    mkdir("sub", 0755);
    put("env.py", "#!/usr/bin/env python3\nprint(1)\n", 0644);
    put("two.sh", "#! /bin/sh  -eu \r\necho\n", 0644);
    put("bare.sh", "#!/bin/bash\n", 0755);
    put("plain.py", "print(1)\n", 0644);
    put("run", "\x7f" "ELF...", 0755);
    put("notes.txt", "hello\n", 0644);
    put("sub/t.py", "print(2)\n", 0644);
    return 0;
}

static void test_interpreter_given(void **st) {
    (void)st;
    ds_err err;
    char *interp[] = {"python3", "-u"};
    assert_string_equal(argv_of(interp, 2, "env.py", &err), "python3|-u|env.py|--lr|3e-4");
    assert_string_equal(argv_of(interp, 1, "notes.txt", &err), "python3|notes.txt|--lr|3e-4");
}

static void test_shebang(void **st) {
    (void)st;
    ds_err err;
    assert_string_equal(argv_of(NULL, 0, "env.py", &err), "/usr/bin/env|python3|./env.py|--lr|3e-4");
    /* one argument at most, the rest of the line trimmed (as the kernel reads it) */
    assert_string_equal(argv_of(NULL, 0, "two.sh", &err), "/bin/sh|-eu|./two.sh|--lr|3e-4");
    assert_string_equal(argv_of(NULL, 0, "./bare.sh", &err), "/bin/bash|./bare.sh|--lr|3e-4");
}

static void test_executable_python_and_path(void **st) {
    (void)st;
    ds_err err;
    assert_string_equal(argv_of(NULL, 0, "run", &err), "./run|--lr|3e-4");
    assert_string_equal(argv_of(NULL, 0, "plain.py", &err), "python3|./plain.py|--lr|3e-4");
    assert_string_equal(argv_of(NULL, 0, "sub/t.py", &err), "python3|sub/t.py|--lr|3e-4");
    /* not a file of the workdir: a command from PATH */
    assert_string_equal(argv_of(NULL, 0, "torchrun", &err), "torchrun|--lr|3e-4");
}

static void test_errors(void **st) {
    (void)st;
    ds_err err;
    assert_null(argv_of(NULL, 0, "notes.txt", &err));
    assert_non_null(strstr(err.msg, "the program notes.txt is not executable, has no #! line and "
                                    "is not a .py file: say what runs it with [job] interpreter"));
    assert_null(argv_of(NULL, 0, "sub/missing.py", &err));
    assert_non_null(strstr(err.msg, "cannot read the program sub/missing.py"));
    assert_null(argv_of(NULL, 0, "sub", &err));
    assert_non_null(strstr(err.msg, "sub"));
}

static int teardown(void **st) {
    (void)st;
    const char *files[] = {"env.py", "two.sh", "bare.sh", "plain.py", "run", "notes.txt", "sub/t.py"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(files[i]);
    rmdir("sub");
    if (chdir("/") != 0) return -1;
    return rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interpreter_given),
        cmocka_unit_test(test_shebang),
        cmocka_unit_test(test_executable_python_and_path),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
