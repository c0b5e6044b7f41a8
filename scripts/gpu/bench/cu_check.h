// The probes' check of a driver call: on failure, the line, the call and
// CUDA's words for the error on stderr, and exit status 1.
#pragma once
#include <cstdio>
#include <cstdlib>

#include <cuda.h>

#define CU(call)                                                               \
    do {                                                                       \
        CUresult rc = (call);                                                  \
        if (rc != CUDA_SUCCESS) {                                              \
            const char *text = nullptr;                                        \
            cuGetErrorString(rc, &text);                                       \
            fprintf(stderr, "line %d %s: %s\n", __LINE__, #call, text ? text : "?"); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)
