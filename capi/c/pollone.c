/* The POLLONE example of seed 003, from C: three pipes, all readable, polled with
 * POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE; successive herdless_poll calls must return
 * fd1, fd2, fd3, fd1, ... one at a time. Usage: pollone native|emulated. Exit 0 if it holds. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "herdless.h"

#define CHECK(call)                                                                          \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ < 0) {                                                                       \
            fprintf(stderr, "%s failed: %d %s\n", #call, rc_, herdless_strerror(rc_));        \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

int main(int argc, char **argv) {
    struct herdless_options options;
    CHECK(herdless_options_init(&options));
    options.backend = (argc > 1 && strcmp(argv[1], "emulated") == 0) ? HERDLESS_BACKEND_EMULATED
                                                                     : HERDLESS_BACKEND_NATIVE;
    herdless_group group;
    CHECK(herdless_group_new(&options, &group));
    herdless_waiter waiter;
    CHECK(herdless_join(group, &waiter));

    int pipes[3][2];
    struct pollfd fds[3];
    for (int i = 0; i < 3; i++) {
        /* Shared descriptors are non-blocking (HERDLESS_POLLEXCL refuses a blocking one). */
        if (pipe(pipes[i]) != 0 || fcntl(pipes[i][0], F_SETFL, O_NONBLOCK) != 0 ||
            write(pipes[i][1], "x", 1) != 1) {
            perror("pipe");
            return 1;
        }
        fds[i].fd = pipes[i][0];
        fds[i].events = POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE;
    }

    /* fd1, fd2, fd3 all readable (and they stay so): the calls return them in turn. */
    const int expected[7] = {0, 1, 2, 0, 1, 2, 0};
    for (int call = 0; call < 7; call++) {
        int n = herdless_poll(waiter, fds, 3, 5000);
        CHECK(n);
        printf("call %d: returned %d;", call + 1, n);
        for (int i = 0; i < 3; i++) printf(" fds[%d].revents=%#x", i, fds[i].revents);
        printf("\n");
        if (n != 1) {
            fprintf(stderr, "call %d returned %d descriptors, not 1\n", call + 1, n);
            return 1;
        }
        for (int i = 0; i < 3; i++) {
            short want = (i == expected[call]) ? POLLIN : 0;
            if (fds[i].revents != want) {
                fprintf(stderr, "call %d: fds[%d].revents=%#x, expected %#x\n", call + 1, i,
                        fds[i].revents, want);
                return 1;
            }
        }
    }

    /* Without HERDLESS_POLLONE one call returns all three. */
    for (int i = 0; i < 3; i++) fds[i].events = POLLIN | HERDLESS_POLLEXCL;
    int all = herdless_poll(waiter, fds, 3, 5000);
    CHECK(all);
    printf("without HERDLESS_POLLONE: returned %d\n", all);
    if (all != 3) return 1;

    CHECK(herdless_leave(waiter));
    CHECK(herdless_group_free(group));
    printf("POLLONE order held on the %s backend\n", options.backend == HERDLESS_BACKEND_NATIVE
                                                          ? "native"
                                                          : "emulated");
    return 0;
}
