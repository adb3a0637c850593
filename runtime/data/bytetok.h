/* The byte-level tokenizer: token i < 256 is byte i, token 256 is end-of-text. Any text
 * round-trips exactly; documents are separated by end-of-text (docs/data.md). */
#ifndef DS_BYTETOK_H
#define DS_BYTETOK_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"

#define DS_BYTETOK_EOT 256u
#define DS_BYTETOK_VOCAB 257u
#define DS_BYTETOK_EOT_TEXT "<|endoftext|>"

/* Where end-of-text goes: nowhere; after each input file; after each run of non-blank
 * lines (a blank line is empty or holds only "\r"; blank lines themselves are dropped). */
typedef enum ds_docs_mode { DS_DOCS_NONE, DS_DOCS_FILE, DS_DOCS_BLANK } ds_docs_mode;

int ds_docs_mode_parse(const char *s, ds_docs_mode *out); /* "none"|"file"|"blank" */

/* Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
 * Returns 0 if s is valid; otherwise -1 with *bad the offset of the first byte of the
 * first invalid sequence. */
int ds_utf8_validate(const uint8_t *s, size_t n, size_t *bad);

/* Receives tokens in order, a few thousand at a time; non-zero stops the encoding. */
typedef int (*ds_token_sink)(void *ctx, const uint32_t *tokens, size_t n, ds_err *err);

/* Encodes one document source (a file's bytes) under mode. */
int ds_bytetok_encode(const uint8_t *s, size_t n, ds_docs_mode mode, ds_token_sink sink,
                      void *ctx, ds_err *err);

/* Maps path, checks it is UTF-8 unless any_bytes (the error names the file, byte offset,
 * line and column), and encodes it into sink. *bytes gets the file size. */
int ds_bytetok_encode_file(const char *path, ds_docs_mode mode, int any_bytes,
                           ds_token_sink sink, void *ctx, uint64_t *bytes, ds_err *err);

/* The text of one token: a byte, or eot_text for end-of-text; NULL (with err) for a
 * token outside the vocabulary. *len gets the length; byte is scratch space. */
const char *ds_bytetok_piece(uint32_t token, const char *eot_text, char *byte, size_t *len,
                             ds_err *err);

#endif
