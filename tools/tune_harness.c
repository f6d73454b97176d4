/*
 * The program `attngen tune` builds around each candidate library for targets it does not JIT
 * (another architecture, a GPU, or --aot): it runs the layer through its argv entry point and
 * its metadata, so one source serves every layer. Built by the target's C compiler and run by
 * the runner command (qemu-aarch64, ssh, or nothing).
 *
 *   harness DIR check                    run once on set 0, write DIR/output.bin
 *   harness DIR time RUNS SETS SLOW_MS   1 warm-up and RUNS timed runs, rotating the SETS input
 *                                        sets; prints "ok T1 T2 ..." or "too_slow T"
 *
 * DIR/NAME.shape holds each argument's extents (Halide order; none for a scalar);
 * DIR/set-S/NAME.bin its bytes in input set S. Failures print "error WHAT" and exit 1.
 */
#include "HalideRuntime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern int attngen_candidate_argv(void **args);
extern const struct halide_filter_metadata_t *attngen_candidate_metadata(void);

enum { max_args = 64, max_sets = 16 };

static void fail(const char *what, const char *name) {
    printf("error %s %s\n", what, name);
    exit(1);
}

/* Waits for a GPU pipeline's output (CPU buffers have no device interface to wait on). */
static void sync(halide_buffer_t *buffer) {
    if (buffer->device_interface != NULL)
        halide_device_sync(NULL, buffer);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static FILE *open_in(const char *dir, const char *sub, const char *name, const char *ext,
                     const char *mode) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s%s%s", dir, sub, name, ext);
    return fopen(path, mode);
}

int main(int argc, char **argv) {
    if (argc < 3)
        fail("usage", "harness DIR check | harness DIR time RUNS SETS SLOW_MS");
    const char *dir = argv[1];
    const int timing = strcmp(argv[2], "time") == 0;
    const int runs = timing && argc > 3 ? atoi(argv[3]) : 0;
    int sets = timing && argc > 4 ? atoi(argv[4]) : 1;
    const double slow_ms = timing && argc > 5 ? atof(argv[5]) : 1e300;
    if (sets < 1 || sets > max_sets)
        fail("sets", "out of range");

    const struct halide_filter_metadata_t *md = attngen_candidate_metadata();
    if (md->num_arguments > max_args)
        fail("arguments", "too many");
    static halide_buffer_t buffers[max_sets][max_args];
    static halide_dimension_t dims[max_sets][max_args][8];
    static uint64_t scalars[max_sets][max_args];
    static void *args[max_sets][max_args];
    int output = -1;
    for (int i = 0; i < md->num_arguments; i++) {
        const struct halide_filter_argument_t *arg = &md->arguments[i];
        const size_t elem = (arg->type.bits + 7) / 8;
        FILE *shape = open_in(dir, "", arg->name, ".shape", "r");
        if (!shape)
            fail("no shape for", arg->name);
        int extents[8], count = 0;
        while (count < 8 && fscanf(shape, "%d", &extents[count]) == 1)
            count++;
        fclose(shape);
        if (arg->kind == halide_argument_kind_output_buffer)
            output = i;
        for (int s = 0; s < sets; s++) {
            char sub[32];
            snprintf(sub, sizeof(sub), "set-%d/", s);
            if (arg->kind == halide_argument_kind_input_scalar) {
                FILE *in = open_in(dir, sub, arg->name, ".bin", "rb");
                if (!in || fread(&scalars[s][i], elem, 1, in) != 1)
                    fail("cannot read", arg->name);
                fclose(in);
                args[s][i] = &scalars[s][i];
                continue;
            }
            halide_buffer_t *b = &buffers[s][i];
            size_t size = 1;
            for (int d = 0; d < count; d++) {
                dims[s][i][d].min = 0;
                dims[s][i][d].extent = extents[d];
                dims[s][i][d].stride = (int32_t)size;
                dims[s][i][d].flags = 0;
                size *= (size_t)extents[d];
            }
            b->dimensions = count;
            b->dim = dims[s][i];
            b->type = arg->type;
            b->host = (uint8_t *)calloc(size, elem);
            if (!b->host)
                fail("out of memory for", arg->name);
            if (arg->kind == halide_argument_kind_input_buffer) {
                FILE *in = open_in(dir, sub, arg->name, ".bin", "rb");
                if (!in || fread(b->host, elem, size, in) != size)
                    fail("cannot read", arg->name);
                fclose(in);
                b->flags = halide_buffer_flag_host_dirty; /* a GPU pipeline copies it over */
            }
            args[s][i] = b;
        }
    }
    if (output < 0)
        fail("no output", "argument");

    int status = attngen_candidate_argv(args[0]);
    if (status != 0) {
        printf("error halide %d\n", status);
        return 1;
    }
    if (!timing) {
        halide_buffer_t *out = &buffers[0][output];
        if (halide_copy_to_host(NULL, out) != 0)
            fail("copy to host", "failed");
        size_t size = (out->type.bits + 7) / 8;
        for (int d = 0; d < out->dimensions; d++)
            size *= (size_t)out->dim[d].extent;
        FILE *file = open_in(dir, "", "output", ".bin", "wb");
        if (!file || fwrite(out->host, 1, size, file) != size)
            fail("cannot write", "output.bin");
        fclose(file);
        printf("ok\n");
        return 0;
    }
    double start = now_ms();
    status = attngen_candidate_argv(args[1 % sets]);
    sync(&buffers[1 % sets][output]);
    const double warm = now_ms() - start;
    if (status == 0 && warm > slow_ms) {
        printf("too_slow %.6f\n", warm);
        return 0;
    }
    printf("ok");
    for (int r = 0; r < runs && status == 0; r++) {
        start = now_ms();
        status = attngen_candidate_argv(args[(r + 2) % sets]);
        sync(&buffers[(r + 2) % sets][output]);
        printf(" %.6f", now_ms() - start);
    }
    printf("\n");
    if (status != 0) {
        printf("error halide %d\n", status);
        return 1;
    }
    return 0;
}
