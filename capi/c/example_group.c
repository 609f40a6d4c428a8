#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include "herdless.h"

int main(void) {
    herdless_group group;
    herdless_waiter waiter;
    int p[2];
    if (herdless_group_new(NULL, &group) < 0 || pipe(p) != 0) return 1;
    fcntl(p[0], F_SETFL, O_NONBLOCK); /* shared: a wake-up may find nothing (HERDLESS_EBLOCKING) */
    /* ... start threads or fork workers here; each one joins the group: */
    int rc = herdless_join(group, &waiter);
    if (rc < 0) { fprintf(stderr, "join: %s\n", herdless_strerror(rc)); return 1; }
    if (write(p[1], "job", 3) != 3) return 1;
    struct pollfd fds[1] = {{.fd = p[0], .events = POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE}};
    int n = herdless_poll(waiter, fds, 1, 5000); /* poll(), but one waiter of the group wakes */
    char buf[3];
    if (n == 1 && (fds[0].revents & POLLIN) && read(p[0], buf, 3) == 3) {
        herdless_consumed(waiter, p[0]); /* read done: the group may hand out the next one */
        printf("got %.3s\n", buf);
    }
    herdless_leave(waiter);
    herdless_group_free(group);
    return n == 1 ? 0 : 1;
}
