/*
 * rdma_cm's port space across processes, over the drop-in librdmacm:
 * built against rdma-core's <rdma/rdma_cma.h> and run by
 * tests/cm_ports.rs, several at once.
 *
 *   cm_ports ADDR PORT REUSE LISTEN [READY_FILE]
 *
 * Creates a TCP-space id, sets RDMA_OPTION_ID_REUSEADDR when REUSE is 1,
 * binds ADDR:PORT (PORT 0: the kernel's pick) and listens when LISTEN is
 * 1. Prints "BIND <errno> <port>" and, when it listened, "LISTEN <errno>"
 * (0: success). With READY_FILE it writes those lines there too and then
 * holds the id for 30 s (the test ends it sooner).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct sockaddr_in a;
	char out[128];
	int n = 0, reuse, rc;

	if (argc < 5) {
		fprintf(stderr, "usage: %s ADDR PORT REUSE LISTEN [READY_FILE]\n", argv[0]);
		return 2;
	}
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(atoi(argv[2]));
	if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", argv[1]);
		return 2;
	}
	reuse = atoi(argv[3]);
	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	if (reuse && rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
				     &reuse, sizeof reuse)) {
		perror("rdma_set_option");
		return 1;
	}
	rc = rdma_bind_addr(id, (struct sockaddr *)&a);
	n += snprintf(out + n, sizeof out - n, "BIND %d %d\n", rc ? errno : 0,
		      rc ? 0 : ntohs(rdma_get_src_port(id)));
	if (!rc && atoi(argv[4])) {
		rc = rdma_listen(id, 4);
		n += snprintf(out + n, sizeof out - n, "LISTEN %d\n", rc ? errno : 0);
	}
	fputs(out, stdout);
	fflush(stdout);
	if (argc > 5) {
		char tmp[4096];
		FILE *f;

		snprintf(tmp, sizeof tmp, "%s.tmp", argv[5]);
		f = fopen(tmp, "w");
		if (!f || fputs(out, f) < 0 || fclose(f) || rename(tmp, argv[5])) {
			perror(argv[5]);
			return 1;
		}
		sleep(30);
	}
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return 0;
}
