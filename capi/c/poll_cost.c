/* The cost of one herdless_poll call that finds its descriptor ready at once (a pipe that
 * stays readable, beside an idle one), in nanoseconds: what the call itself adds, with no
 * sleep in it. docs/c.md lists its figures.
 * Usage: poll_cost [calls] [timeout_ms] [native|emulated]  (timeout -1: the blocking path) */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "herdless.h"

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200000, timeout = argc > 2 ? atoi(argv[2]) : -1;
    herdless_group g;
    herdless_waiter w;
    int a[2], b[2];
    struct herdless_options o;
    herdless_options_init(&o);
    if (argc > 3 && strcmp(argv[3], "emulated") == 0) o.backend = HERDLESS_BACKEND_EMULATED;
    if (herdless_group_new(&o, &g) || herdless_join(g, &w) || pipe(a) || pipe(b)) return 2;
    if (fcntl(a[0], F_SETFL, O_NONBLOCK) != 0) return 2; /* exclusive: non-blocking */
    if (write(a[1], "x", 1) != 1) return 2;
    struct pollfd fds[2] = {{.fd = a[0], .events = POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE},
                            {.fd = b[0], .events = POLLIN}};
    struct timespec s, e;
    for (int i = 0; i < 1000; i++) herdless_poll(w, fds, 2, timeout);
    clock_gettime(CLOCK_MONOTONIC, &s);
    for (int i = 0; i < n; i++)
        if (herdless_poll(w, fds, 2, timeout) != 1) return 3;
    clock_gettime(CLOCK_MONOTONIC, &e);
    printf("%.0f ns/call\n", ((e.tv_sec - s.tv_sec) * 1e9 + (e.tv_nsec - s.tv_nsec)) / n);
    return 0;
}
