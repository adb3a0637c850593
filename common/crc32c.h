/* CRC-32C (Castagnoli): the checksum of every checkpoint section (and of any other
 * format that uses it). Hardware (SSE4.2)
 * when the CPU has it, a table otherwise: both give the same value. */
#ifndef DS_CRC32C_H
#define DS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc over buf; start with crc = 0. crc32c(crc32c(0, a), b) == crc32c(0, ab). */
uint32_t ds_crc32c(uint32_t crc, const void *buf, size_t len);

/* The table path alone, whatever the CPU: tests compare it with ds_crc32c. */
uint32_t ds_crc32c_portable(uint32_t crc, const void *buf, size_t len);

#endif
