/* Finer checks of the rsocket API over the drop-in libraries (run by
 * tests/rsocket.rs): `rsocket server ADDR PORT` and `rsocket client ADDR
 * PORT`. The server checks EAGAIN on a non-blocking rrecv with nothing
 * sent, rpoll on an rsocket beside a pipe, MSG_WAITALL, the peer's
 * address, EOF (0) after the peer's rclose and after the peer's exit
 * without rclose, and the errors of
 * unsupported or unknown sockets and of riomap without a connection. Prints "ok: ..." per check; exits 0
 * when all pass. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <unistd.h>
#include "net_test.h"

#define CHECK(c, what)                                                      \
	do {                                                                \
		if (!(c)) {                                                 \
			fprintf(stderr, "FAIL: %s (errno %d %s)\n", what,   \
				errno, strerror(errno));                    \
			exit(1);                                            \
		}                                                           \
		printf("ok: %s\n", what);                                   \
		fflush(stdout);                                             \
	} while (0)

static int server(struct sockaddr_in *a)
{
	int l, s, p[2], n;
	char buf[16];
	struct pollfd fds[2];
	struct sockaddr_in peer;
	socklen_t len = sizeof peer;

	l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0, "rsocket");
	CHECK(rbind(l, (struct sockaddr *) a, sizeof *a) == 0, "rbind");
	CHECK(rlisten(l, 4) == 0, "rlisten");
	s = raccept(l, (struct sockaddr *) &peer, &len);
	CHECK(s >= 0, "raccept");
	CHECK(peer.sin_family == AF_INET && peer.sin_addr.s_addr != a->sin_addr.s_addr,
	      "raccept gives the peer's address");

	CHECK(rfcntl(s, F_SETFL, O_NONBLOCK) == 0, "rfcntl O_NONBLOCK");
	CHECK(rfcntl(s, F_GETFL) == O_NONBLOCK, "rfcntl F_GETFL");
	n = rrecv(s, buf, sizeof buf, 0);
	CHECK(n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK),
	      "non-blocking rrecv with no data: EAGAIN");
	fds[0].fd = s;
	fds[0].events = POLLIN;
	CHECK(rpoll(fds, 1, 100) == 0, "rpoll times out with no data");

	/* rpoll over an rsocket and a pipe: the pipe is ready. */
	CHECK(pipe(p) == 0 && write(p[1], "p", 1) == 1, "pipe");
	fds[1].fd = p[0];
	fds[1].events = POLLIN;
	n = rpoll(fds, 2, 1000);
	CHECK(n == 1 && fds[1].revents == POLLIN && fds[0].revents == 0,
	      "rpoll on an rsocket and a pipe");

	CHECK(rfcntl(s, F_SETFL, 0) == 0, "rfcntl blocking");
	CHECK(rsend(s, "x", 1, 0) == 1, "rsend");
	fds[0].events = POLLIN;
	fds[0].revents = 0;
	CHECK(rpoll(fds, 1, 5000) == 1 && (fds[0].revents & POLLIN), "rpoll POLLIN");
	n = rrecv(s, buf, 5, MSG_WAITALL);
	CHECK(n == 5 && !memcmp(buf, "hello", 5), "rrecv MSG_WAITALL");

	n = rrecv(s, buf, sizeof buf, 0);
	CHECK(n == 0, "rrecv after the peer's rclose: EOF");
	n = rsend(s, "y", 1, 0);
	CHECK(n == -1 && errno == ECONNRESET, "rsend after the peer's rclose: ECONNRESET");

	CHECK(rclose(s) == 0, "rclose");

	/* A peer that exits with its connection up (no rclose): the
	 * library's exit path sends the DREQ, which ends a blocking rrecv. */
	s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept a second connection");
	n = rrecv(s, buf, sizeof buf, 0);
	CHECK(n == 0, "rrecv after the peer exited without rclose: EOF");
	CHECK(rclose(s) == 0, "rclose the second connection");
	CHECK(rclose(l) == 0, "rclose listener");
	n = rrecv(s, buf, 1, 0);
	CHECK(n == -1 && errno == EBADF, "rrecv on a closed rsocket: EBADF");
	n = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(n == -1 && errno == EOPNOTSUPP, "SOCK_DGRAM: EOPNOTSUPP");
	l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(riomap(l, buf, sizeof buf, PROT_WRITE, 0, -1) == -1 && errno == EINVAL,
	      "riomap before a connection: EINVAL");
	CHECK(rclose(l) == 0, "rclose an unconnected rsocket");
	return 0;
}

static int client(struct sockaddr_in *a)
{
	int s;
	char c;
	fd_set r;
	struct timeval tv;

	s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0, "rsocket");
	CHECK(rconnect(s, (struct sockaddr *) a, sizeof *a) == 0, "rconnect");
	FD_ZERO(&r);
	FD_SET(s, &r);
	tv.tv_sec = 10;
	tv.tv_usec = 0;
	CHECK(rselect(s + 1, &r, NULL, NULL, &tv) == 1 && FD_ISSET(s, &r),
	      "rselect: readable once data came");
	CHECK(rrecv(s, &c, 1, 0) == 1 && c == 'x', "rrecv");
	CHECK(rsend(s, "hel", 3, 0) == 3 && rsend(s, "lo", 2, 0) == 2, "rsend");
	usleep(200000);
	CHECK(rclose(s) == 0, "rclose");

	s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0 && rconnect(s, (struct sockaddr *) a, sizeof *a) == 0,
	      "rconnect a second connection");
	usleep(200000);
	exit(0); /* with the connection up */
}

int main(int argc, char **argv)
{
	struct sockaddr_in a;

	if (argc != 4) {
		fprintf(stderr, "usage: %s server|client ADDR PORT\n", argv[0]);
		return 2;
	}
	a = addr_of(argv[2], argv[3]);
	return !strcmp(argv[1], "server") ? server(&a) : client(&a);
}
