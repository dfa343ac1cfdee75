/*
 * Kubernetes resource quantities (resource.Quantity's text form) as
 * gpuslice-dra reads them from claims and writes them into its
 * ResourceSlice: "25", "0.5", "1e3", "8Gi", "500m", "2k".
 */
#ifndef GPUSLICE_DRA_KUBE_QUANTITY_H
#define GPUSLICE_DRA_KUBE_QUANTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest quantity text accepted (the API's are far shorter). */
#define KUBE_QUANTITY_MAX_TEXT 64

/* Parses a quantity to a whole count (bytes), rounding a fraction up
 * ("0.5" is 1, "1500m" is 2): 0, or -1 with a message in error for a
 * negative, an overflow of 64 bits or text that is not a quantity. */
int kube_quantity_bytes(const char *text, uint64_t *out, char *error, size_t error_size);

/* Parses a quantity to a double ("250m" is 0.25): 0, or -1 with a message
 * in error for a negative, a value too large for a double or junk. */
int kube_quantity_double(const char *text, double *out, char *error, size_t error_size);

/* Writes bytes as a quantity: with the largest binary suffix that divides
 * it exactly ("80Gi", "1536Ki"), else as a plain integer ("1000"). false
 * if out is too small. */
bool kube_quantity_format_bytes(uint64_t bytes, char *out, size_t out_size);

#endif
