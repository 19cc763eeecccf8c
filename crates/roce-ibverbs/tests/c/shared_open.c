/*
 * Opens one device and says what came of it, for tests/shared_device.rs:
 *
 *     shared_open DEVICE [SECONDS]
 *
 * prints "opened gid0 ADDRESS" (GID 0 as an IPv6 address, ::ffff:a.b.c.d
 * for IPv4) or "open failed: errno N (message)", then holds the context
 * open SECONDS (default 0) and exits: 0 opened, 1 the open failed, 2 no
 * such device.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: shared_open DEVICE [SECONDS]\n");
		return 2;
	}
	double hold = argc > 2 ? atof(argv[2]) : 0;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		printf("no device list: %s\n", strerror(errno));
		return 2;
	}
	struct ibv_device *dev = NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			dev = list[i];
	if (!dev) {
		printf("no device %s\n", argv[1]);
		return 2;
	}
	errno = 0;
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx) {
		int e = errno;
		printf("open failed: errno %d (%s)\n", e, strerror(e));
		return 1;
	}
	union ibv_gid gid;
	char text[INET6_ADDRSTRLEN] = "?";
	if (ibv_query_gid(ctx, 1, 0, &gid) == 0)
		inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
	printf("opened gid0 %s\n", text);
	fflush(stdout);
	if (hold > 0)
		usleep((useconds_t)(hold * 1e6));
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
