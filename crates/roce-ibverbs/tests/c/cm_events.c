/*
 * The events an rdma_cm program sees when a connection fails, over the
 * drop-in librdmacm: built against rdma-core's <rdma/rdma_cma.h> and run
 * by tests/cm_events.rs. Each mode prints what it saw on one line
 * ("EVENT <name> <status>") and exits 0, or exits 1 with a message.
 *
 *   connect ADDR PORT      resolve, make a QP, connect; print the outcome
 *   connect_exit ADDR PORT connect, then exit without disconnecting
 *   serve ADDR PORT        accept one connection; print its next event
 *   drop_listener ADDR PORT SECONDS
 *                          listen, let a request queue (SECONDS at
 *                          most), destroy the listener without taking it
 *   noroute ADDR           rdma_resolve_addr; print errno on failure
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include "net_test.h"

static struct rdma_event_channel *ch;

/* The next event, waiting at most `secs` seconds on the channel's fd. */
static struct rdma_cm_event *next(int secs)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	if (poll(&p, 1, secs * 1000) != 1) {
		fprintf(stderr, "no event in %d s\n", secs);
		exit(1);
	}
	if (rdma_get_cm_event(ch, &e))
		die("rdma_get_cm_event");
	return e;
}

static void expect(int kind, int secs)
{
	struct rdma_cm_event *e = next(secs);

	if (e->event != kind) {
		fprintf(stderr, "expected %s, got %s (%d)\n", rdma_event_str(kind),
			rdma_event_str(e->event), e->status);
		exit(1);
	}
	rdma_ack_cm_event(e);
}

static void qp_on(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa;

	memset(&qa, 0, sizeof qa);
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &qa))
		die("rdma_create_qp");
}

static struct rdma_cm_id *connect_to(const char *ip, const char *port)
{
	struct sockaddr_in dst = addr_of(ip, port);
	struct rdma_conn_param cp;
	struct rdma_cm_id *id;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		die("rdma_resolve_addr");
	expect(RDMA_CM_EVENT_ADDR_RESOLVED, 5);
	if (rdma_resolve_route(id, 2000))
		die("rdma_resolve_route");
	expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 5);
	qp_on(id);
	memset(&cp, 0, sizeof cp);
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(id, &cp))
		die("rdma_connect");
	return id;
}

int main(int argc, char **argv)
{
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;

	if (argc < 3) {
		fprintf(stderr, "usage: %s MODE ADDR [PORT [SECONDS]]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");

	if (!strcmp(argv[1], "noroute")) {
		struct sockaddr_in dst = addr_of(argv[2], "7174");

		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0) {
			e = next(10);
			printf("EVENT %s %d\n", rdma_event_str(e->event), e->status);
			return 0;
		}
		printf("ERRNO %d\n", errno);
		return 0;
	}
	if (argc < 4)
		return 2;

	if (!strcmp(argv[1], "connect")) {
		connect_to(argv[2], argv[3]);
		e = next(60);
		printf("EVENT %s %d\n", rdma_event_str(e->event), e->status);
		return 0;
	}
	if (!strcmp(argv[1], "connect_exit")) {
		connect_to(argv[2], argv[3]);
		expect(RDMA_CM_EVENT_ESTABLISHED, 20);
		printf("EVENT RDMA_CM_EVENT_ESTABLISHED 0\n");
		/* Exit with the connection up: no rdma_disconnect, no destroy. */
		return 0;
	}
	if (!strcmp(argv[1], "serve") || !strcmp(argv[1], "drop_listener")) {
		struct sockaddr_in me = addr_of(argv[2], argv[3]);
		struct rdma_cm_id *listen_id;

		if (rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_bind_addr(listen_id, (struct sockaddr *)&me))
			die("rdma_bind_addr");
		if (rdma_listen(listen_id, 4))
			die("rdma_listen");
		printf("LISTENING\n");
		if (!strcmp(argv[1], "drop_listener")) {
			/* Until a request waits on the channel (not taken),
			 * SECONDS at most. */
			struct pollfd p = { .fd = ch->fd, .events = POLLIN };

			if (poll(&p, 1, (argc > 4 ? atoi(argv[4]) : 2) * 1000) == 1)
				printf("QUEUED\n");
			if (rdma_destroy_id(listen_id))
				die("rdma_destroy_id");
			printf("DESTROYED\n");
			sleep(1);
			return 0;
		}
		e = next(30);
		if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			fprintf(stderr, "got %s\n", rdma_event_str(e->event));
			return 1;
		}
		id = e->id;
		rdma_ack_cm_event(e);
		qp_on(id);
		if (rdma_accept(id, NULL))
			die("rdma_accept");
		expect(RDMA_CM_EVENT_ESTABLISHED, 10);
		e = next(30);
		printf("EVENT %s %d\n", rdma_event_str(e->event), e->status);
		return 0;
	}
	fprintf(stderr, "unknown mode %s\n", argv[1]);
	return 2;
}
