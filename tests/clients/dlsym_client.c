/*
 * A program that finds CUDA through dlopen and dlsym, as JAX/XLA and ctypes
 * do, and checks that dlsym still answers as glibc's does for everything
 * else. It is linked against getpid_wrap.so (an RTLD_NEXT interposer).
 * Built with -DOLD_GLIBC_DLSYM it calls dlsym@GLIBC_2.2.5.
 *   dlsym_client QUOTA_STEP...: default | next | hooked:LIB:SYMBOL | real:LIB:SYMBOL
 *                               | alloc:NAME:SIZE (through cuMemAlloc_v2 from dlsym)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef OLD_GLIBC_DLSYM
/* As a program built against glibc before 2.34 (a manylinux wheel, say):
 * its dlsym is the older version of the symbol. */
__asm__(".symver dlsym, dlsym@GLIBC_2.2.5");
#endif

extern int getpid_wrapped_calls;

static const char *owner(void *f) {
    Dl_info info;
    if (!f || !dladdr(f, &info) || !info.dli_fname) return "none";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

int main(int argc, char **argv) {
    for (int a = 1; a < argc; a++) {
        char step[256], *fields[4] = {0};
        int n = 0;
        snprintf(step, sizeof step, "%s", argv[a]);
        for (char *tok = strtok(step, ":"); tok && n < 4; tok = strtok(NULL, ":")) fields[n++] = tok;
        if (!strcmp(fields[0], "default")) {
            printf("default same=%d\n", dlsym(RTLD_DEFAULT, "puts") == (void *)puts);
        } else if (!strcmp(fields[0], "next")) {
            pid_t pid = getpid();
            printf("next ok=%d wrapped=%d\n", pid == (pid_t)syscall(SYS_getpid), getpid_wrapped_calls);
        } else if (!strcmp(fields[0], "lookup")) {
            void *library = dlopen(fields[1], RTLD_NOW);
            void *f = library ? dlsym(library, fields[2]) : NULL;
            printf("lookup %s owner=%s\n", fields[2], owner(f));
        } else if (!strcmp(fields[0], "alloc")) {
            void *library = dlopen("libcuda.so.1", RTLD_NOW);
            int (*alloc)(unsigned long long *, size_t) = library ? dlsym(library, "cuMemAlloc_v2") : NULL;
            unsigned long long p = 0;
            int rc = alloc ? alloc(&p, strtoull(fields[2], NULL, 0) << 20) : -1;
            printf("alloc %s rc=%d\n", fields[1], rc);
        }
        fflush(stdout);
    }
    return 0;
}
