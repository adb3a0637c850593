/* `dsrun tokenize`: text files -> a token file with the byte-level vocabulary, and back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytetok.h"
#include "subcommands.h"
#include "tokfile.h"

static const char *USAGE =
    "usage: dsrun tokenize [--docs=file|blank|none] [--bytes] [--width=2|4] IN.txt... OUT.tok\n"
    "       dsrun tokenize --decode [--eot=TEXT] IN.tok [OUT.txt|-]\n"
    "       dsrun tokenize --info IN.tok\n"
    "Byte-level vocabulary: tokens 0..255 are bytes, 256 is end-of-text (vocab 257).\n"
    "  --docs=file   end-of-text after each input file (default)\n"
    "  --docs=blank  end-of-text after each run of non-blank lines; blank lines dropped\n"
    "  --docs=none   no end-of-text tokens\n"
    "  --bytes       accept any bytes (default: input must be valid UTF-8)\n"
    "  --width=N     bytes per token in the file (default 2)\n"
    "  --decode      token file -> text, end-of-text written as TEXT (default "
    DS_BYTETOK_EOT_TEXT ")\n"
    "  --info        print the header and check every token against the vocabulary\n";

typedef struct counting_sink {
    ds_tokwriter *w;
    uint64_t docs;
} counting_sink;

static int write_tokens(void *ctx, const uint32_t *t, size_t n, ds_err *err) {
    counting_sink *cs = ctx;
    for (size_t i = 0; i < n; i++) cs->docs += t[i] == DS_BYTETOK_EOT;
    return ds_tokwriter_put(cs->w, t, n, err);
}

static int encode(int nin, char **in, const char *out, ds_docs_mode mode, int any_bytes,
                  int width) {
    ds_err err = {{0}};
    ds_tokwriter w;
    if (ds_tokwriter_open(&w, out, width, DS_BYTETOK_VOCAB, &err) != 0) goto fail;
    counting_sink cs = {.w = &w, .docs = 0};
    uint64_t total = 0;
    for (int i = 0; i < nin; i++) {
        uint64_t bytes = 0;
        if (ds_bytetok_encode_file(in[i], mode, any_bytes, write_tokens, &cs, &bytes, &err) != 0)
            goto fail;
        total += bytes;
    }
    if (ds_tokwriter_close(&w, &err) != 0) goto fail;
    printf("%s: %llu tokens (%llu end-of-text) from %llu bytes in %d file%s\n", out,
           (unsigned long long)w.count, (unsigned long long)cs.docs,
           (unsigned long long)total, nin, nin == 1 ? "" : "s");
    return 0;
fail:
    ds_tokwriter_abort(&w);
    fprintf(stderr, "dsrun tokenize: %s\n", err.msg);
    return 1;
}

static int decode(const char *in, const char *out, const char *eot) {
    ds_err err = {{0}};
    ds_tokfile tf;
    if (ds_tokfile_open(&tf, in, &err) != 0) {
        fprintf(stderr, "dsrun tokenize: %s\n", err.msg);
        return 1;
    }
    FILE *fp = !out || !strcmp(out, "-") ? stdout : fopen(out, "wb");
    if (!fp) {
        perror(out);
        ds_tokfile_close(&tf);
        return 1;
    }
    int rc = 0;
    for (uint64_t i = 0; i < tf.count && rc == 0; i++) {
        char byte;
        size_t len;
        const char *piece = ds_bytetok_piece(ds_tokfile_get(&tf, i), eot, &byte, &len, &err);
        if (!piece) {
            fprintf(stderr, "dsrun tokenize: %s: index %llu: %s\n", in, (unsigned long long)i,
                    err.msg);
            rc = 1;
        } else if (fwrite(piece, 1, len, fp) != len) {
            perror(out ? out : "stdout");
            rc = 1;
        }
    }
    if (fp != stdout && fclose(fp) != 0) rc = 1;
    else if (fp == stdout) fflush(stdout);
    ds_tokfile_close(&tf);
    return rc;
}

static int info(const char *in) {
    ds_err err = {{0}};
    ds_tokfile tf;
    if (ds_tokfile_open(&tf, in, &err) != 0) {
        fprintf(stderr, "dsrun tokenize: %s\n", err.msg);
        return 1;
    }
    uint32_t vocab = tf.vocab ? tf.vocab : (tf.width == 2 ? 65536u : UINT32_MAX);
    int rc = ds_tokfile_check_range(&tf, vocab, &err);
    if (rc == 0)
        printf("%s: version %u, %d-byte tokens, %llu tokens, vocab %u%s: ok\n", in,
               DS_TOKFILE_VERSION, tf.width, (unsigned long long)tf.count, tf.vocab,
               tf.vocab ? "" : " (unknown)");
    else
        fprintf(stderr, "dsrun tokenize: %s\n", err.msg);
    ds_tokfile_close(&tf);
    return rc ? 1 : 0;
}

int dsrun_tokenize_main(int argc, char **argv) {
    ds_docs_mode mode = DS_DOCS_FILE;
    int any_bytes = 0, width = 2, do_decode = 0, do_info = 0;
    const char *eot = DS_BYTETOK_EOT_TEXT;
    int i = 1; /* argv[0] is "tokenize" */
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strncmp(a, "--docs=", 7)) {
            if (ds_docs_mode_parse(a + 7, &mode) != 0) {
                fprintf(stderr, "dsrun tokenize: --docs=%s: expected file, blank or none\n",
                        a + 7);
                return 2;
            }
        } else if (!strcmp(a, "--bytes")) {
            any_bytes = 1;
        } else if (!strncmp(a, "--width=", 8)) {
            width = atoi(a + 8);
            if (strcmp(a + 8, "2") != 0 && strcmp(a + 8, "4") != 0) {
                fprintf(stderr, "dsrun tokenize: %s: expected 2 or 4\n", a);
                return 2;
            }
        } else if (!strcmp(a, "--decode")) {
            do_decode = 1;
        } else if (!strncmp(a, "--eot=", 6)) {
            eot = a + 6;
        } else if (!strcmp(a, "--info")) {
            do_info = 1;
        } else {
            fprintf(stderr, "dsrun tokenize: unknown option %s\n%s", a, USAGE);
            return 2;
        }
    }
    int nargs = argc - i;
    if (do_info) {
        if (nargs != 1) goto usage;
        return info(argv[i]);
    }
    if (do_decode) {
        if (nargs != 1 && nargs != 2) goto usage;
        return decode(argv[i], nargs == 2 ? argv[i + 1] : NULL, eot);
    }
    if (nargs < 2) goto usage;
    return encode(nargs - 1, argv + i, argv[argc - 1], mode, any_bytes, width);
usage:
    fputs(USAGE, stderr);
    return 2;
}
