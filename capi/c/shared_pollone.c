/* The seed's four-call illustration (seed 003, the POLLONE request), verbatim but for `poll`
 * renamed to herdless_poll_shared (and the bits' names, which <poll.h> does not have): three
 * descriptors with full POLLIN, no group, no waiter; the four calls must return fds[0],
 * fds[1], fds[2], fds[0]. The backend is the environment's HERDLESS_BACKEND. Exit 0 if it
 * holds. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "herdless.h"

#define POLLEXCL HERDLESS_POLLEXCL
#define POLLONE HERDLESS_POLLONE
#define TIMEOUT 5

static int check(int call, int ret, struct pollfd *fds, int expected) {
    printf("call %d: returned %d; revents %#x %#x %#x\n", call, ret, fds[0].revents,
           fds[1].revents, fds[2].revents);
    for (int i = 0; i < 3; i++)
        if (fds[i].revents != (i == expected ? POLLIN : 0)) return 1;
    return ret != 1;
}

int main(void) {
    int p1[2], p2[2], p3[2];
    if (pipe(p1) || pipe(p2) || pipe(p3)) return 2;
    int fd1 = p1[0], fd2 = p2[0], fd3 = p3[0];
    for (int i = 0; i < 3; i++) {
        int r = (int[]){fd1, fd2, fd3}[i], w = (int[]){p1[1], p2[1], p3[1]}[i];
        /* Shared descriptors are non-blocking: a wake-up may find nothing. */
        if (fcntl(r, F_SETFL, O_NONBLOCK) != 0 || write(w, "full", 4) != 4) return 2;
    }
    int failed = 0;

    struct pollfd fds[3];
    int ret;

    fds[0].fd = fd1;
    fds[0].events = POLLIN | POLLEXCL | POLLONE;

    fds[1].fd = fd2;
    fds[1].events = POLLIN | POLLEXCL | POLLONE;

    fds[2].fd = fd3;
    fds[2].events = POLLIN | POLLEXCL | POLLONE;

    /* Assuming that fd1, fd2, fd3 has full POLLIN of events */

    /* then 1st call to: */
    ret = herdless_poll_shared(fds, 3, TIMEOUT * 1000);
    /* shall return 1, and fds[0].revents is set to POLLIN all others fds revetns are 0 */
    failed |= check(1, ret, fds, 0);

    /* then 2nd call to: */
    ret = herdless_poll_shared(fds, 3, TIMEOUT * 1000);
    /* shall return 1, and fds[1].revents is set to POLLIN all others fds revetns are 0 */
    failed |= check(2, ret, fds, 1);

    /* then 3rd call to: */
    ret = herdless_poll_shared(fds, 3, TIMEOUT * 1000);
    /* shall return 1, and fds[2].revents is set to POLLIN all others fds revetns are 0 */
    failed |= check(3, ret, fds, 2);

    /* then 4th call to: */
    ret = herdless_poll_shared(fds, 3, TIMEOUT * 1000);
    /* shall return 1, and fds[0].revents is set to POLLIN all others fds revetns are 0 */
    failed |= check(4, ret, fds, 0);

    if (ret < 0) fprintf(stderr, "herdless_poll_shared: %s\n", herdless_strerror(herdless_last_error()));
    printf(failed ? "FAIL: the four calls did not serve fd1, fd2, fd3, fd1\n"
                  : "the four calls served fd1, fd2, fd3, fd1\n");
    return failed;
}
