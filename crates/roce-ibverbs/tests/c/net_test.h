/*
 * What the C programs of tests/ that speak IPv4 sockets share: an error
 * exit with errno's text, and an address from the command line.
 */
#ifndef ROCE_NET_TEST_H
#define ROCE_NET_TEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints `what` and errno's text, and exits 1. */
static inline void die(const char *what)
{
	fprintf(stderr, "%s: %s\n", what, strerror(errno));
	exit(1);
}

/* The IPv4 address `ip`, port `port`; exits 1 on a bad address. */
static inline struct sockaddr_in addr_of(const char *ip, const char *port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(atoi(port));
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", ip);
		exit(1);
	}
	return a;
}

#endif
