/* An interposer of the common kind: it defines getpid and finds the next
 * definition with dlsym(RTLD_NEXT). If vramshare's dlsym answered relative
 * to itself instead of to this library, this would find itself and recurse. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/types.h>

int getpid_wrapped_calls;

pid_t getpid(void) {
    pid_t (*next)(void) = (pid_t (*)(void))dlsym(RTLD_NEXT, "getpid");
    getpid_wrapped_calls++;
    return next();
}
