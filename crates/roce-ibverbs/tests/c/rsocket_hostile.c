/*
 * A hostile rsocket peer (docs/rsocket.md, docs/security.md): the server
 * side speaks librdmacm and verbs directly, accepts an rsocket
 * connection with a well-formed rs_conn_data, and then writes one data
 * message that claims 0x1fffffff bytes (far more than the half of the
 * victim's receive ring a message may fill). The client is an ordinary
 * rsocket program: its rrecv must fail with EPROTO, return no bytes and
 * not crash.
 *
 *   rsocket_hostile server ADDR PORT
 *   rsocket_hostile client ADDR PORT
 *
 * Prints "ok: NAME" or "FAIL: NAME: why"; exits with the number of
 * failures (100 when it could not set up). Built and run by
 * tests/rsocket.rs.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#define RS_CONN_DATA_LEN 40
#define RS_OP_DATA 0u

static int failures;

static void check(const char *name, int ok, const char *why) {
	if (ok)
		printf("ok: %s\n", name);
	else {
		printf("FAIL: %s: %s\n", name, why);
		failures++;
	}
	fflush(stdout);
}

static void die(const char *what) {
	printf("FAIL: setup: %s: %s\n", what, strerror(errno));
	exit(100);
}

static struct sockaddr_in address(const char *addr, const char *port) {
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(atoi(port)) };
	if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
		printf("FAIL: setup: bad address %s\n", addr);
		exit(100);
	}
	return sin;
}

/* The next CM event, which must be `want`. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want) {
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	if (ev->event != want) {
		printf("FAIL: setup: got %s, wanted %s\n", rdma_event_str(ev->event), rdma_event_str(want));
		exit(100);
	}
	return ev;
}

static uint64_t be64_at(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return be64toh(v); }
static uint32_t be32_at(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return be32toh(v); }
static void put_be64(uint8_t *p, uint64_t v) { v = htobe64(v); memcpy(p, &v, 8); }
static void put_be32(uint8_t *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }

static int server(const char *addr, const char *port) {
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listener;
	struct sockaddr_in sin = address(addr, port);
	if (!ch || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(listener, (struct sockaddr *)&sin) || rdma_listen(listener, 1))
		die("listen");

	struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *id = ev->id;
	if (ev->param.conn.private_data_len < RS_CONN_DATA_LEN) {
		printf("FAIL: setup: the client's rs_conn_data is %u bytes\n", ev->param.conn.private_data_len);
		return 100;
	}
	const uint8_t *req = ev->param.conn.private_data;
	/* The victim's receive ring (rs_conn_data.data_buf). */
	uint64_t ring = be64_at(req + 24);
	uint32_t ring_key = be32_at(req + 32);
	rdma_ack_cm_event(ev);

	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 32, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
	if (!pd || !cq || rdma_create_qp(id, pd, &qa))
		die("rdma_create_qp");
	static char mem[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, sizeof(mem), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	/* Receives for whatever the client sends first (its credits). */
	for (int i = 0; i < 16; i++) {
		struct ibv_recv_wr r = { .wr_id = i }, *bad;
		if (ibv_post_recv(id->qp, &r, &bad))
			die("ibv_post_recv");
	}
	uint8_t cd[RS_CONN_DATA_LEN] = { 0 };
	cd[0] = 1; /* version; flags 0: little endian, no iomap */
	cd[2] = 0; cd[3] = 16; /* credits */
	put_be64(cd + 8, (uintptr_t)mem); put_be32(cd + 16, mr->rkey); put_be32(cd + 20, 1024);
	put_be64(cd + 24, (uintptr_t)mem + 2048); put_be32(cd + 32, mr->rkey); put_be32(cd + 36, 1024);
	struct rdma_conn_param p = { .private_data = cd, .private_data_len = sizeof(cd),
		.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7 };
	if (rdma_accept(id, &p))
		die("rdma_accept");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));

	/* One data message of 8 bytes that says it carries 0x1fffffff. */
	struct ibv_sge s = { .addr = (uintptr_t)mem, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = 99, .sg_list = &s, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.imm_data = htobe32((RS_OP_DATA << 29) | 0x1fffffffu);
	w.wr.rdma.remote_addr = ring;
	w.wr.rdma.rkey = ring_key;
	if (ibv_post_send(id->qp, &w, &bad))
		die("ibv_post_send");
	/* Its completion (the victim's side acknowledged it), within 5 s. */
	int sent = 0;
	for (time_t end = time(NULL) + 5; !sent && time(NULL) < end;) {
		struct ibv_wc wc;
		while (ibv_poll_cq(cq, 1, &wc) == 1)
			if (wc.wr_id == 99)
				sent = wc.status == IBV_WC_SUCCESS ? 1 : -1;
	}
	check("the oversized message was delivered", sent == 1, "no successful completion");
	/* Wait for the victim to go (its disconnect), at most 10 s. */
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	if (poll(&pfd, 1, 10000) == 1) {
		if (rdma_get_cm_event(ch, &ev) == 0)
			rdma_ack_cm_event(ev);
	}
	return failures;
}

static int client(const char *addr, const char *port) {
	struct sockaddr_in sin = address(addr, port);
	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || rconnect(s, (struct sockaddr *)&sin, sizeof(sin)))
		die("rconnect");
	struct pollfd pfd = { .fd = s, .events = POLLIN };
	int r = rpoll(&pfd, 1, 10000);
	check("rpoll wakes for the hostile message", r == 1, "rpoll timed out");
	char buf[4096];
	memset(buf, 0, sizeof(buf));
	errno = 0;
	ssize_t n = rrecv(s, buf, sizeof(buf), 0);
	char why[128];
	snprintf(why, sizeof(why), "rrecv returned %zd, errno %d (%s)", n, errno, strerror(errno));
	check("rrecv of an oversized message: EPROTO", n == -1 && errno == EPROTO, why);
	rclose(s);
	return failures;
}

int main(int argc, char **argv) {
	if (argc != 4) {
		printf("usage: %s server|client ADDR PORT\n", argv[0]);
		return 100;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "server"))
		return server(argv[2], argv[3]);
	return client(argv[2], argv[3]);
}
