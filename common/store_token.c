#include "store_token.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

int ds_store_make_token(char out[DS_STORE_TOKEN_LEN + 1], ds_err *err) {
    uint8_t raw[DS_STORE_TOKEN_LEN / 2];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return ds_err_errno(err, errno, "store token: getrandom");
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DS_STORE_TOKEN_LEN] = '\0';
    return 0;
}

int ds_store_token_valid(const char *s) {
    if (!s) return 0;
    for (int i = 0; i < DS_STORE_TOKEN_LEN; i++)
        if (!strchr("0123456789abcdefABCDEF", s[i]) || s[i] == '\0') return 0;
    return s[DS_STORE_TOKEN_LEN] == '\0';
}

int ds_store_token_equal(const void *a, const void *b, size_t n) {
    const volatile uint8_t *x = a, *y = b;
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++) diff |= x[i] ^ y[i];
    return diff == 0;
}
