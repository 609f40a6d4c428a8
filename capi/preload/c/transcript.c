/* What a program sees of epoll, poll, close and dup2, written down call by call: results,
 * errno names and events. The preload's tests run it with and without libherdless_preload.so
 * and compare the transcripts byte for byte: without the flags nothing may differ, and with
 * EPOLLEXCLUSIVE the answers the kernel gives (errors, the registration's end at close and
 * dup2, a number reused) must be the same too. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static const char *name(int e) {
  switch (e) {
    case 0: return "0";
    case EBADF: return "EBADF";
    case EEXIST: return "EEXIST";
    case ENOENT: return "ENOENT";
    case EINVAL: return "EINVAL";
    case EPERM: return "EPERM";
    case EFAULT: return "EFAULT";
    case ELOOP: return "ELOOP";
    case EINTR: return "EINTR";
    default: return strerror(e);
  }
}

/* Prints "what = rc errno". */
static int say(const char *what, int rc) {
  printf("%-44s = %d %s\n", what, rc, rc < 0 ? name(errno) : "");
  return rc;
}

static void events(const char *what, int ep, int timeout) {
  struct epoll_event evs[4];
  memset(evs, 0, sizeof evs);
  int n = epoll_wait(ep, evs, 4, timeout);
  printf("%-44s = %d %s", what, n, n < 0 ? name(errno) : "");
  for (int i = 0; i < n; i++) printf(" [%#x data %llu]", evs[i].events, (unsigned long long)evs[i].data.u64);
  printf("\n");
}

static int nonblocking_pipe(int p[2]) {
  int rc = pipe2(p, O_NONBLOCK | O_CLOEXEC);
  if (rc < 0) { perror("pipe2"); exit(2); }
  return rc;
}

int main(void) {
  int ep = say("epoll_create1(EPOLL_CLOEXEC) >= 0", epoll_create1(EPOLL_CLOEXEC) >= 0 ? 0 : -1);
  (void)ep;
  ep = epoll_create1(EPOLL_CLOEXEC);
  int p[2], r[2];
  nonblocking_pipe(p);
  struct epoll_event in = {.events = EPOLLIN, .data.u64 = 11};
  struct epoll_event ex = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = 22};

  printf("-- without the flag\n");
  say("ctl ADD pipe", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &in));
  say("ctl ADD pipe again", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &in));
  say("ctl MOD pipe", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &in));
  events("wait 0 (nothing written)", ep, 0);
  say("write", (int)write(p[1], "x", 1));
  events("wait 0 (written)", ep, 0);
  events("wait 0 (written, level)", ep, 0);
  say("ctl DEL pipe", epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL));
  say("ctl DEL pipe again", epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL));
  say("ctl MOD unregistered", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &in));
  say("ctl ADD closed number", epoll_ctl(ep, EPOLL_CTL_ADD, 999, &in));
  say("ctl ADD on a non-epoll", epoll_ctl(p[0], EPOLL_CTL_ADD, p[1], &in));
  say("ctl ADD itself", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &in));
  say("ctl bad op", epoll_ctl(ep, 99, p[0], &in));
  FILE *f = tmpfile();
  say("ctl ADD regular file", epoll_ctl(ep, EPOLL_CTL_ADD, fileno(f), &in));
  struct epoll_event one;
  say("wait maxevents 0", epoll_wait(ep, &one, 0, 0));
  say("wait bad epfd", epoll_wait(999, &one, 1, 0));
  say("pwait 0", epoll_pwait(ep, &one, 1, 0, NULL));
  struct pollfd pf[2] = {{p[0], POLLIN, 0}, {999, POLLIN, 0}};
  int n = poll(pf, 2, 0);
  printf("%-44s = %d revents %#x %#x\n", "poll (readable, closed number)", n, pf[0].revents, pf[1].revents);
  struct timespec zero = {0, 0};
  n = ppoll(pf, 1, &zero, NULL);
  printf("%-44s = %d revents %#x\n", "ppoll", n, pf[0].revents);
  say("close closed number", close(999));
  say("dup2 closed number", dup2(999, 50));
  say("dup2 onto itself", dup2(p[0], p[0]) == p[0] ? 0 : -1);
  say("dup3 onto itself", dup3(p[0], p[0], 0));
  char c;
  say("read", (int)read(p[0], &c, 1));

  printf("-- with EPOLLEXCLUSIVE\n");
  struct epoll_event bad = {.events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT};
  say("ctl ADD exclusive | oneshot", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &bad));
  say("ctl ADD exclusive regular file", epoll_ctl(ep, EPOLL_CTL_ADD, fileno(f), &ex));
  int inner = epoll_create1(EPOLL_CLOEXEC);
  say("ctl ADD exclusive epoll", epoll_ctl(ep, EPOLL_CTL_ADD, inner, &ex));
  say("ctl ADD exclusive closed number", epoll_ctl(ep, EPOLL_CTL_ADD, 999, &ex));
  say("ctl ADD exclusive pipe", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ex));
  say("ctl ADD exclusive pipe again", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ex));
  say("ctl ADD pipe again without", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &in));
  say("ctl MOD exclusive pipe", epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &in));
  events("wait 0 (nothing written)", ep, 0);
  say("write", (int)write(p[1], "y", 1));
  events("wait 100 (written)", ep, 100);
  say("read", (int)read(p[0], &c, 1));
  events("wait 0 (read)", ep, 0);
  nonblocking_pipe(r);
  say("ctl ADD second pipe without", epoll_ctl(ep, EPOLL_CTL_ADD, r[0], &in));
  say("write both", (int)(write(p[1], "z", 1) + write(r[1], "z", 1)));
  events("wait 100 (both: exclusive and not)", ep, 100);
  say("read both", (int)(read(p[0], &c, 1) + read(r[0], &c, 1)));
  say("ctl DEL exclusive pipe", epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL));
  say("ctl DEL exclusive pipe again", epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL));
  say("write", (int)write(p[1], "w", 1));
  events("wait 0 (deleted)", ep, 0);
  say("read", (int)read(p[0], &c, 1));

  printf("-- close and reuse\n");
  say("ctl ADD exclusive pipe", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ex));
  int old = p[0];
  say("write", (int)write(p[1], "v", 1));
  say("close registered read end", close(p[0]));
  close(p[1]);
  events("wait 0 (closed)", ep, 0);
  nonblocking_pipe(p);
  say("new pipe has the old number", p[0] == old ? 0 : -1);
  say("ctl ADD exclusive reused number", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ex));
  events("wait 0 (reused, nothing written)", ep, 0);
  say("write", (int)write(p[1], "u", 1));
  events("wait 100 (reused, written)", ep, 100);
  {
    struct epoll_event evs[2];
    sigset_t mask;
    sigemptyset(&mask);
    int n = epoll_pwait(ep, evs, 2, 100, &mask);
    printf("%-44s = %d [%#x data %llu]\n", "pwait 100 (reused, written)", n, n > 0 ? evs[0].events : 0,
           n > 0 ? (unsigned long long)evs[0].data.u64 : 0ULL);
    struct timespec ts = {0, 100 * 1000 * 1000};
    n = epoll_pwait2(ep, evs, 2, &ts, NULL);
    printf("%-44s = %d [%#x data %llu]\n", "pwait2 100ms (reused, written)", n, n > 0 ? evs[0].events : 0,
           n > 0 ? (unsigned long long)evs[0].data.u64 : 0ULL);
    struct timespec bad = {0, -1};
    say("pwait2 bad timeout", epoll_pwait2(ep, evs, 2, &bad, NULL));
  }
  say("read", (int)read(p[0], &c, 1));

  printf("-- dup2 over a registered number\n");
  int q[2];
  nonblocking_pipe(q);
  say("write to the other pipe", (int)write(q[1], "t", 1));
  say("dup2 other pipe onto registered", dup2(q[0], p[0]) == p[0] ? 0 : -1);
  events("wait 0 (replaced: the old file's gone)", ep, 0);
  say("ctl ADD exclusive the dup", epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ex));
  events("wait 100 (the dup, readable)", ep, 100);
  /* The kernel keeps a registration while its open file lives under another number (a dup):
   * the preload ends it with the number (docs/c.md). With the dup's original closed first,
   * the number is the file's last: both end it. */
  say("close the dup's original", close(q[0]));
  say("dup3 other onto it", dup3(r[0], p[0], O_CLOEXEC) == p[0] ? 0 : -1);
  events("wait 0 (replaced again)", ep, 0);

  printf("-- close the instance, a new one under its number\n");
  int epno = ep;
  say("close epoll", close(ep));
  ep = epoll_create1(EPOLL_CLOEXEC);
  say("new epoll has the old number", ep == epno ? 0 : -1);
  say("ctl DEL in the new one", epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL));
  say("write", (int)write(r[1], "s", 1));
  say("ctl ADD exclusive in the new one", epoll_ctl(ep, EPOLL_CTL_ADD, r[0], &ex));
  events("wait 100 (new instance)", ep, 100);
  printf("-- end\n");
  return 0;
}
