/* HERDLESS_POLLEXCL and HERDLESS_POLLONE clash with no POLL* bit this system's <poll.h>
 * defines: checked at compile time (the test compiles this file and runs it). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <poll.h>
#include <stdio.h>

#include "herdless.h"

#define HERDLESS_BITS (HERDLESS_POLLEXCL | HERDLESS_POLLONE)
#define NO_CLASH(bit) _Static_assert(((bit) & HERDLESS_BITS) == 0, #bit " clashes")

NO_CLASH(POLLIN);
NO_CLASH(POLLPRI);
NO_CLASH(POLLOUT);
NO_CLASH(POLLERR);
NO_CLASH(POLLHUP);
NO_CLASH(POLLNVAL);
#ifdef POLLRDNORM
NO_CLASH(POLLRDNORM);
#endif
#ifdef POLLRDBAND
NO_CLASH(POLLRDBAND);
#endif
#ifdef POLLWRNORM
NO_CLASH(POLLWRNORM);
#endif
#ifdef POLLWRBAND
NO_CLASH(POLLWRBAND);
#endif
#ifdef POLLMSG
NO_CLASH(POLLMSG);
#endif
#ifdef POLLREMOVE
NO_CLASH(POLLREMOVE);
#endif
#ifdef POLLRDHUP
NO_CLASH(POLLRDHUP);
#endif
_Static_assert(HERDLESS_POLLEXCL > 0 && HERDLESS_POLLEXCL <= 0x7fff, "fits a short");
_Static_assert(HERDLESS_POLLONE > 0 && HERDLESS_POLLONE <= 0x7fff, "fits a short");
_Static_assert((HERDLESS_POLLEXCL & HERDLESS_POLLONE) == 0, "distinct bits");

int main(void) {
    printf("HERDLESS_POLLEXCL %#x, HERDLESS_POLLONE %#x: no clash with <poll.h>\n",
           HERDLESS_POLLEXCL, HERDLESS_POLLONE);
    return 0;
}
