/* The linger of an rsocket's close (run by tests/rsocket.rs):
 * `rsocket_linger server ADDR PORT` accepts, sends 4096 bytes and closes
 * at once, printing how long rclose took; `rsocket_linger client ADDR
 * PORT` connects, waits 300 ms before reading, reads and checks the 4096
 * bytes, waits 100 ms more and closes. The server's rclose holds its
 * DISCONNECT until the client has read (its credit update or its own
 * DISCONNECT), at most a second: Linux's rsocket reports data and
 * hang-up taken in one rpoll as POLLIN|POLLHUP, and rstream's
 * asynchronous mode takes any POLLHUP for an error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LEN 4096

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void fail(const char *what)
{
	fprintf(stderr, "FAIL: %s (errno %d %s)\n", what, errno, strerror(errno));
	exit(1);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a;
	char buf[LEN];
	int s, l, i, n, got = 0;
	double t0;

	if (argc != 4)
		return 2;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(atoi(argv[3]));
	inet_pton(AF_INET, argv[2], &a.sin_addr);
	if (!strcmp(argv[1], "server")) {
		l = rsocket(AF_INET, SOCK_STREAM, 0);
		if (l < 0 || rbind(l, (struct sockaddr *) &a, sizeof a) || rlisten(l, 1))
			fail("listen");
		s = raccept(l, NULL, NULL);
		if (s < 0)
			fail("raccept");
		for (i = 0; i < LEN; i++)
			buf[i] = (char) (i * 7 + 3);
		if (rsend(s, buf, LEN, 0) != LEN)
			fail("rsend");
		t0 = now_ms();
		if (rclose(s))
			fail("rclose");
		printf("rclose took %.0f ms\n", now_ms() - t0);
		rclose(l);
		return 0;
	}
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || rconnect(s, (struct sockaddr *) &a, sizeof a))
		fail("rconnect");
	usleep(300000);
	while (got < LEN) {
		n = rrecv(s, buf + got, LEN - got, 0);
		if (n <= 0)
			fail("rrecv");
		got += n;
	}
	for (i = 0; i < LEN; i++)
		if (buf[i] != (char) (i * 7 + 3))
			fail("the data differ");
	printf("ok: %d bytes read\n", got);
	usleep(100000);
	rclose(s);
	return 0;
}
