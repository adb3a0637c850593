/* `dsrun ckpt`: look inside a state checkpoint without training.
 *   inspect [--pretty|--compact] DIR  metadata (the engine object indented on a terminal,
 *                             on one line otherwise), then every checksum verified
 *   export DIR OUT.safetensors  the model's weights in one safetensors file, as the
 *                               engine's export table in meta.json names them */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_export.h"
#include "ds_json.h"
#include "ds_json_read.h"
#include "subcommands.h"

static const char *CKPT_USAGE =
    "usage: dsrun ckpt inspect [--pretty|--compact] DIR\n"
    "                                         metadata (the engine object indented on a\n"
    "                                         terminal); verify every checksum\n"
    "       dsrun ckpt export DIR OUT.safetensors\n"
    "DIR is a checkpoint directory (its `latest` is followed) or a step-N directory.\n";

static void print_arrays(const ds_ckpt *ck) {
    printf("arrays:\n");
    for (uint32_t i = 0; i < ds_ckpt_narrays(ck); i++) {
        ds_ckpt_array a;
        ds_ckpt_array_at(ck, i, &a);
        printf("  %-32s %-5s %12llu  ", a.name, ds_dtype_name(a.dtype),
               (unsigned long long)a.numel);
        for (uint32_t k = 0; k < a.npieces; k++) {
            int rank;
            uint64_t b, e;
            ds_ckpt_array_range(ck, i, k, &rank, &b, &e);
            printf("%s%d:[%llu,%llu)", k ? " " : "", rank, (unsigned long long)b,
                   (unsigned long long)e);
        }
        printf("\n");
    }
}

/* Every shard is read in full; each bad one is reported, not just the first. */
static int verify_shards(ds_ckpt *ck) {
    int bad = 0;
    uint64_t total = 0;
    printf("shards:\n");
    for (int r = 0; r < ds_ckpt_world(ck); r++) {
        const char *path;
        uint64_t bytes;
        uint32_t nsec;
        ds_ckpt_shard_info(ck, r, &path, &bytes, &nsec);
        total += bytes;
        const char *name = strrchr(path, '/');
        printf("  %-24s %14llu bytes %5u sections  ", name ? name + 1 : path,
               (unsigned long long)bytes, nsec);
        ds_err err = {""};
        if (ds_ckpt_verify_shard(ck, r, &err) == 0) {
            printf("ok\n");
        } else {
            printf("BAD\n");
            fprintf(stderr, "dsrun ckpt: %s\n", err.msg);
            bad++;
        }
    }
    if (bad) printf("%d of %d shards failed verification\n", bad, ds_ckpt_world(ck));
    else printf("all checksums verified (%llu bytes)\n", (unsigned long long)total);
    return bad ? 1 : 0;
}

static void print_engine(const char *engine, int pretty) {
    ds_err err = {""};
    ds_jv *v = pretty ? ds_jv_parse(engine, strlen(engine), &err) : NULL;
    if (!v) { /* compact, as saved (the canonical form) */
        printf("engine: %s\n", engine);
        return;
    }
    printf("engine: ");
    ds_json j;
    ds_json_init_file(&j, stdout, 1);
    ds_jv_emit(&j, v);
    ds_json_newline(&j);
    ds_jv_free(v);
}

static int inspect(const char *dir, int pretty) {
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(dir, &err);
    if (!ck) {
        fprintf(stderr, "dsrun ckpt: %s\n", err.msg);
        return 1;
    }
    printf("checkpoint %s\n", ds_ckpt_dir(ck));
    printf("step %lld, saved by %d rank%s\n", (long long)ds_ckpt_step(ck), ds_ckpt_world(ck),
           ds_ckpt_world(ck) == 1 ? "" : "s");
    print_arrays(ck);
    print_engine(ds_ckpt_meta_extra(ck), pretty);
    int rc = verify_shards(ck);
    ds_ckpt_close(ck);
    return rc;
}

static int export(const char *dir, const char *out) {
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(dir, &err);
    int rc = ck ? ds_ckpt_export_safetensors(ck, out, &err) : -1;
    if (rc == 0)
        printf("wrote %s from %s (step %lld)\n", out, ds_ckpt_dir(ck),
               (long long)ds_ckpt_step(ck));
    else
        fprintf(stderr, "dsrun ckpt export: %s\n", err.msg);
    ds_ckpt_close(ck);
    return rc ? 1 : 0;
}

int dsrun_ckpt_main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "inspect") == 0) return inspect(argv[2], isatty(1));
    if (argc == 4 && strcmp(argv[1], "inspect") == 0 &&
        (!strcmp(argv[2], "--pretty") || !strcmp(argv[2], "--compact")))
        return inspect(argv[3], !strcmp(argv[2], "--pretty"));
    if (argc == 4 && strcmp(argv[1], "export") == 0) return export(argv[2], argv[3]);
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(CKPT_USAGE, stdout);
        return 0;
    }
    fputs(CKPT_USAGE, stderr);
    return 2;
}
