/*
 * A process evaluator in C: f(x) = sin(x0), speaking "gammaboard-jsonrpc-v2" on stdin/stdout.
 *
 * Proof that the protocol is language independent: no Python, no JSON library, ~150 lines.
 * Build:  cc -O2 -o sin_evaluator sin_evaluator.c -lm
 * Use:    [integrand] kind = "process", command = ["./sin_evaluator"]
 * Assumes a little-endian machine (x86-64, arm64), as the protocol's binary blocks are LE.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int discrete_dims = 0, continuous_dims = 0, components = 1;

/* Pointer to the value of "key" in a JSON text (no nesting awareness: fine for our keys). */
static const char *value_of(const char *json, const char *key) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(json, quoted);
    if (!p) return NULL;
    p += strlen(quoted);
    while (*p == ' ' || *p == ':' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static long long_of(const char *json, const char *key, long fallback) {
    const char *p = value_of(json, key);
    return p ? strtol(p, NULL, 10) : fallback;
}

/* Number of elements of a flat JSON array value ("[1, 2, 3]" -> 3, "[]" -> 0). */
static int array_len(const char *json, const char *key) {
    const char *p = value_of(json, key);
    if (!p || *p != '[') return -1;
    int count = 0, any = 0;
    for (p++; *p && *p != ']'; p++) {
        if (*p == ',') count++;
        else if (*p != ' ') any = 1;
    }
    return any ? count + 1 : 0;
}

static int read_exact(void *buf, size_t size) {
    return size == 0 || fread(buf, 1, size, stdin) == size;
}

/* Reads one frame; returns 0 at end of input. */
static int read_frame(char **json, unsigned char **bin, size_t *bin_len) {
    char line[8192];
    long content = -1, binary = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "\r\n") == 0 || strcmp(line, "\n") == 0) {
            if (content >= 0) break;
            continue;
        }
        if (strncasecmp(line, "Content-Length:", 15) == 0) content = strtol(line + 15, NULL, 10);
        if (strncasecmp(line, "Binary-Length:", 14) == 0) binary = strtol(line + 14, NULL, 10);
    }
    if (content < 0) return 0;
    *json = calloc((size_t)content + 1, 1);
    *bin = malloc((size_t)binary + 1);
    *bin_len = (size_t)binary;
    if (!read_exact(*json, (size_t)content) || !read_exact(*bin, (size_t)binary)) return 0;
    return 1;
}

static void send_frame(const char *json, const void *bin, size_t bin_len) {
    printf("Content-Length: %zu\r\n", strlen(json));
    if (bin_len) printf("Binary-Length: %zu\r\n", bin_len);
    printf("\r\n%s", json);
    if (bin_len) fwrite(bin, 1, bin_len, stdout);
    fflush(stdout);
}

static void send_error(long id, const char *message) {
    char out[512];
    snprintf(out, sizeof out, "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"error\":{\"code\":-32000,"
             "\"message\":\"%s\",\"data\":{\"traceback\":\"\"}}}", id, message);
    send_frame(out, NULL, 0);
}

static void initialize(long id, const char *json) {
    char out[256];
    const char *protocol = value_of(json, "protocol");
    if (!protocol || strncmp(protocol, "\"gammaboard-jsonrpc-v2\"", 23) != 0) {
        send_error(id, "unsupported protocol; this evaluator speaks gammaboard-jsonrpc-v2");
        return;
    }
    int k = array_len(json, "discrete_cardinalities");
    discrete_dims = k < 0 ? 0 : k;
    continuous_dims = (int)long_of(json, value_of(json, "dims") ? "dims" : "continuous_dims", 0);
    int m = array_len(json, "components");
    components = m <= 0 ? 1 : m;
    fprintf(stderr, "@gblog\tinfo\tC sin evaluator ready: %d discrete, %d continuous, "
            "%d component(s)\n", discrete_dims, continuous_dims, components);
    snprintf(out, sizeof out, "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"result\":{\"ok\":true,"
             "\"metadata\":{\"language\":\"c\"}}}", id);
    send_frame(out, NULL, 0);
}

static void eval_batch(long id, const char *json, const unsigned char *bin, size_t bin_len) {
    long n = long_of(json, "nr_samples", -1);
    size_t want = (size_t)n * (size_t)(discrete_dims + continuous_dims) * 8;
    if (n < 0 || bin_len != want || continuous_dims < 1) {
        send_error(id, "eval_batch: binary block does not match nr_samples and the domain");
        return;
    }
    const unsigned char *xs = bin + (size_t)n * (size_t)discrete_dims * 8;
    double *out = malloc((size_t)n * (size_t)components * sizeof(double) + 1);
    for (long i = 0; i < n; i++) {
        double x0;
        memcpy(&x0, xs + (size_t)i * (size_t)continuous_dims * 8, sizeof x0);
        for (int c = 0; c < components; c++) out[i * components + c] = sin(x0);
    }
    char head[128];
    snprintf(head, sizeof head, "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"result\":{}}", id);
    send_frame(head, out, (size_t)n * (size_t)components * sizeof(double));
    free(out);
}

int main(void) {
    char *json;
    unsigned char *bin;
    size_t bin_len;
    while (read_frame(&json, &bin, &bin_len)) {
        long id = long_of(json, "id", 0);
        const char *method = value_of(json, "method");
        if (method && strncmp(method, "\"initialize\"", 12) == 0) initialize(id, json);
        else if (method && strncmp(method, "\"eval_batch\"", 12) == 0)
            eval_batch(id, json, bin, bin_len);
        else send_error(id, "unknown method");
        free(json);
        free(bin);
    }
    return 0;
}
