/* DeepSpeed JSON configs (`--deepspeed_config FILE`, `[engine] deepspeed_config = FILE`)
 * mapped onto the engine's options (common/engine_opts.h): ZeRO stage and bucket, fp16 /
 * bf16 and the loss scaler, the batch sizes (train_batch_size checked against the micro
 * batch, the accumulation and the world size, as DeepSpeed does), clipping, the AdamW
 * settings and the warmup schedules. docs/from-deepspeed.md has the table.
 *
 * Precedence: an option the job spec's [engine] or a --set gives is kept over the
 * config's value (and said so); the config fills in the rest. "auto" takes the job's
 * value (or the default, or for the batch sizes what the others make it), and says which.
 * Keys that do not apply are listed, each with why, in one warning; a key of the wrong
 * type, a value out of range or batch sizes that disagree are errors naming the file,
 * its line and the key's path. */
#ifndef DS_DS_CONFIG_H
#define DS_DS_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "ds_err.h"
#include "jobspec.h"

/* What the mapping did, for the user: lines separated by '\n', "" when none. */
typedef struct ds_dsconfig_notes {
    char *applied;  /* "zero_optimization.stage = 2 -> zero_stage = 2" */
    char *resolved; /* "train_batch_size = auto -> 32 (4 x 4 x 2 ranks)" */
    char *kept;     /* "bf16.enabled -> precision = bf16: the job's precision = fp16 kept" */
    char *ignored;  /* "zero_optimization.overlap_comm: why it does not apply" */
} ds_dsconfig_notes;

/* Maps the config text (name for messages) onto spec for a world of world_size ranks. 0,
 * or -1 with "NAME:LINE: key.path: what was wrong" in err (spec then partly changed). */
int ds_dsconfig_apply_text(ds_jobspec *spec, const char *name, const char *text, size_t n,
                           int world_size, ds_dsconfig_notes *notes, ds_err *err);
/* Reads spec->deepspeed_config and applies it; 0 and empty notes when there is none. */
int ds_dsconfig_apply(ds_jobspec *spec, int world_size, ds_dsconfig_notes *notes, ds_err *err);
/* Writes the notes as dslaunch prints them: what was applied and resolved, what the job
 * kept, and one warning listing what did not apply. */
void ds_dsconfig_print(const ds_dsconfig_notes *notes, const char *name, FILE *out);
void ds_dsconfig_notes_free(ds_dsconfig_notes *notes);
/* dslaunch's step: applies spec->deepspeed_config (if any) and prints the notes to out. */
int ds_dsconfig_use(ds_jobspec *spec, int world_size, FILE *out, ds_err *err);

#endif
