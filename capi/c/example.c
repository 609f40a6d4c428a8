#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include "herdless.h"

int main(void) {
    int p[2];
    if (pipe(p) != 0) return 1;
    fcntl(p[0], F_SETFL, O_NONBLOCK); /* shared: a wake-up may find nothing */
    /* ... start threads, fork workers or run this program many times: no setup ... */
    if (write(p[1], "job", 3) != 3) return 1;
    struct pollfd fds[1] = {{.fd = p[0], .events = POLLIN | HERDLESS_POLLEXCL}};
    int n = herdless_poll_shared(fds, 1, 5000); /* was: poll(fds, 1, 5000); */
    if (n < 0) { perror("herdless_poll_shared"); return 1; }
    char buf[3];
    if (n == 1 && (fds[0].revents & POLLIN) && read(p[0], buf, 3) == 3) printf("got %.3s\n", buf);
    return n == 1 ? 0 : 1;
}
