/*
 * A plain BSD-sockets program, unaware of RDMA: run by tests/rsocket.rs
 * under rdma-core's librspreload.so (LD_PRELOAD), which turns its TCP
 * sockets into rsockets over the drop-in librdmacm.
 *
 *   sock_echo serve ADDR PORT      accept one connection, echo what comes
 *                                  until EOF, print "SERVED <bytes>"
 *   sock_echo send ADDR PORT BYTES connect, send BYTES of a pattern in
 *                                  uneven pieces, read the echo back, check
 *                                  it, print "ECHOED <bytes>"
 *
 * Exits 0 on success, 1 with a message otherwise.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "net_test.h"

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 31 + 7);
}

static int serve(const char *ip, const char *port)
{
	struct sockaddr_in a = addr_of(ip, port);
	char buf[65536];
	long total = 0;
	int one = 1, l, c;
	ssize_t n;

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0)
		die("socket");
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4))
		die("bind/listen");
	printf("LISTENING\n");
	fflush(stdout);
	c = accept(l, NULL, NULL);
	if (c < 0)
		die("accept");
	while ((n = recv(c, buf, sizeof buf, 0)) > 0) {
		ssize_t off = 0;

		while (off < n) {
			ssize_t m = send(c, buf + off, n - off, 0);

			if (m <= 0)
				die("send");
			off += m;
		}
		total += n;
	}
	if (n < 0)
		die("recv");
	close(c);
	close(l);
	printf("SERVED %ld\n", total);
	return 0;
}

static int send_all(const char *ip, const char *port, long bytes)
{
	struct sockaddr_in a = addr_of(ip, port);
	unsigned char *out = malloc(bytes), *in = malloc(bytes);
	long sent = 0, got = 0, piece = 1;
	int s, one = 1;

	if (!out || !in)
		die("malloc");
	for (long i = 0; i < bytes; i++)
		out[i] = pattern(i);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		die("socket");
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(s, (struct sockaddr *)&a, sizeof a))
		die("connect");
	while (got < bytes) {
		if (sent < bytes) {
			long k = piece < bytes - sent ? piece : bytes - sent;
			ssize_t m = send(s, out + sent, k, 0);

			if (m <= 0)
				die("send");
			sent += m;
			piece = piece * 3 % 20011 + 1; /* uneven pieces */
		}
		while (got < sent) {
			ssize_t m = recv(s, in + got, bytes - got, 0);

			if (m <= 0) {
				if (m == 0)
					errno = EPIPE;
				die("recv");
			}
			got += m;
		}
	}
	shutdown(s, SHUT_WR);
	close(s);
	for (long i = 0; i < bytes; i++) {
		if (in[i] != out[i]) {
			fprintf(stderr, "byte %ld differs: %u, not %u\n", i, in[i], out[i]);
			return 1;
		}
	}
	printf("ECHOED %ld\n", got);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "serve"))
		return serve(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "send"))
		return send_all(argv[2], argv[3], atol(argv[4]));
	fprintf(stderr, "usage: %s serve ADDR PORT | send ADDR PORT BYTES\n", argv[0]);
	return 2;
}
