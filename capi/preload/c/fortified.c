/* poll() in a program built with _FORTIFY_SOURCE and an array length the compiler cannot
 * see: glibc's headers make it a call of __poll_chk, which the preload answers as poll.
 * Two non-blocking pipes, both readable, polled with POLLIN | HERDLESS_POLLONE (0x4000):
 * under the preload one call returns one of them, in turn (1 then 2 then 1); without it,
 * plain poll returns both. Prints each call's count and which entries were ready. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
  (void)argv;
  int a[2], b[2];
  if (pipe2(a, O_NONBLOCK) || pipe2(b, O_NONBLOCK)) return 2;
  if (write(a[1], "x", 1) != 1 || write(b[1], "y", 1) != 1) return 2;
  nfds_t n = (nfds_t)argc + 1; /* 2, unknown to the compiler */
  for (int call = 0; call < 3; call++) {
    struct pollfd fds[2] = {{a[0], POLLIN | 0x4000, 0}, {b[0], POLLIN | 0x4000, 0}};
    int got = poll(fds, n, 1000);
    printf("poll: %d ready:%s%s\n", got, fds[0].revents & POLLIN ? " a" : "",
           fds[1].revents & POLLIN ? " b" : "");
  }
  return 0;
}
