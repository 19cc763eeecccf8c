/*
 * Two contexts of one device in one process, as on a NIC (issue 32,
 * item 1): the same GID table, QPs of the two reaching each other
 * through GID 0 with SEND, RDMA WRITE, RDMA READ and both atomics;
 * objects that stay each context's own (a PD, CQ, SRQ, channel or AH of
 * one is EINVAL on the other, as the kernel answers); an asynchronous
 * event on the async_fd of the context owning the object; a context
 * closed while the other goes on.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; the exit status is the
 * number of failures. Built and run by tests/contexts.rs.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static int failures;
#define CHECK(name, cond, ...) do { \
	if (cond) printf("ok %s\n", name); \
	else { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } \
	fflush(stdout); } while (0)

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
	char *buf;
	struct ibv_mr *mr;
};

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* One completion within 5 s: its status, or -1. */
static int one(struct ibv_cq *cq, struct ibv_wc *wc) {
	double end = now() + 5;
	while (now() < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			return -2;
		if (n == 1)
			return wc->status;
	}
	return -1;
}

static struct ibv_qp *rc_qp(struct side *s, struct ibv_cq *cq) {
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	return ibv_create_qp(s->pd, &a);
}

/* Connects `qp` to `dest` at `dgid` (the peer context's GID 0). */
static int connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid dgid) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 1;
	a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = dgid; a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 3; a.rnr_retry = 3; a.sq_psn = 1; a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void open_side(struct ibv_device *dev, struct side *s) {
	s->ctx = ibv_open_device(dev);
	if (!s->ctx) {
		printf("FAIL setup: open: %s\n", strerror(errno));
		exit(100);
	}
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
	s->qp = rc_qp(s, s->cq);
	s->buf = calloc(1, 4096);
	s->mr = ibv_reg_mr(s->pd, s->buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!s->pd || !s->cq || !s->qp || !s->mr || ibv_query_gid(s->ctx, 1, 0, &s->gid)) {
		printf("FAIL setup: objects (%s)\n", strerror(errno));
		exit(100);
	}
}

static int post(struct side *s, enum ibv_wr_opcode op, uint32_t off, uint32_t len, struct side *peer,
		uint64_t add, uint64_t swap) {
	struct ibv_sge g = { .addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->lkey };
	struct ibv_send_wr w = { .wr_id = op, .sg_list = &g, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		w.wr.atomic.remote_addr = (uintptr_t)peer->buf + 1024;
		w.wr.atomic.rkey = peer->mr->rkey;
		w.wr.atomic.compare_add = add;
		w.wr.atomic.swap = swap;
	} else if (op != IBV_WR_SEND) {
		w.wr.rdma.remote_addr = (uintptr_t)peer->buf + 2048;
		w.wr.rdma.rkey = peer->mr->rkey;
	}
	return ibv_post_send(s->qp, &w, &bad);
}

int main(void) {
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		printf("FAIL setup: no device\n");
		return 100;
	}
	struct side a, b;
	open_side(list[0], &a);
	open_side(list[0], &b);

	/* One GID table for both contexts, as a NIC's port has. */
	int same = 1;
	for (int i = 0; i < 4; i++) {
		union ibv_gid ga, gb;
		int ra = ibv_query_gid(a.ctx, 1, i, &ga), rb = ibv_query_gid(b.ctx, 1, i, &gb);
		if (ra != rb || (ra == 0 && memcmp(&ga, &gb, sizeof(ga))))
			same = 0;
	}
	CHECK("same_gid_table", same, "the two contexts' GID tables differ");

	/* Each QP names its peer with its own context's GID 0, as rdma-core's
	 * tests do: on a NIC both contexts have that GID. */
	if (connect_qp(a.qp, b.qp->qp_num, a.gid) || connect_qp(b.qp, a.qp->qp_num, b.gid)) {
		printf("FAIL setup: connect (%s)\n", strerror(errno));
		return 100;
	}
	struct ibv_wc wc;

	/* SEND from A's QP to B's, through GID 0. */
	struct ibv_sge rg = { .addr = (uintptr_t)b.buf, .length = 64, .lkey = b.mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 9, .sg_list = &rg, .num_sge = 1 }, *rbad;
	ibv_post_recv(b.qp, &rw, &rbad);
	memcpy(a.buf, "hello from context A", 21);
	int sa = post(&a, IBV_WR_SEND, 0, 21, &b, 0, 0) ? -3 : one(a.cq, &wc);
	int sb = one(b.cq, &wc);
	CHECK("send_through_gid0", sa == IBV_WC_SUCCESS && sb == IBV_WC_SUCCESS && wc.byte_len == 21 &&
	      !strcmp(b.buf, "hello from context A"), "send %d recv %d len %u", sa, sb, wc.byte_len);

	/* RDMA WRITE from B into A's region. */
	memset(b.buf + 64, 0x5a, 128);
	struct ibv_sge wg = { .addr = (uintptr_t)b.buf + 64, .length = 128, .lkey = b.mr->lkey };
	struct ibv_send_wr ww = { .wr_id = 1, .sg_list = &wg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED }, *wbad;
	ww.wr.rdma.remote_addr = (uintptr_t)a.buf + 2048;
	ww.wr.rdma.rkey = a.mr->rkey;
	int w = ibv_post_send(b.qp, &ww, &wbad) ? -3 : one(b.cq, &wc);
	CHECK("write_across", w == IBV_WC_SUCCESS && (unsigned char)a.buf[2048] == 0x5a &&
	      (unsigned char)a.buf[2048 + 127] == 0x5a, "status %d", w);

	/* RDMA READ by A of B's region. */
	memset(b.buf + 2048, 0x33, 256);
	int r = post(&a, IBV_WR_RDMA_READ, 512, 256, &b, 0, 0) ? -3 : one(a.cq, &wc);
	CHECK("read_across", r == IBV_WC_SUCCESS && a.buf[512] == 0x33 && a.buf[767] == 0x33, "status %d", r);

	/* Atomics by A on B's word. */
	*(uint64_t *)(b.buf + 1024) = 40;
	int f = post(&a, IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 8, &b, 2, 0) ? -3 : one(a.cq, &wc);
	int c = post(&a, IBV_WR_ATOMIC_CMP_AND_SWP, 16, 8, &b, 42, 7) ? -3 : one(a.cq, &wc);
	CHECK("atomics_across", f == IBV_WC_SUCCESS && c == IBV_WC_SUCCESS && *(uint64_t *)(a.buf + 8) == 40 &&
	      *(uint64_t *)(a.buf + 16) == 42 && *(uint64_t *)(b.buf + 1024) == 7,
	      "fetch-add %d cmp-swap %d, old %lu %lu, now %lu", f, c, *(unsigned long *)(a.buf + 8),
	      *(unsigned long *)(a.buf + 16), *(unsigned long *)(b.buf + 1024));

	/* Objects stay their context's. */
	struct ibv_qp_init_attr qa = { .send_cq = b.cq, .recv_cq = b.cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	errno = 0;
	struct ibv_qp *mixed = ibv_create_qp(a.pd, &qa);
	CHECK("qp_pd_and_cq_of_two_contexts", !mixed && errno == EINVAL, "qp %p errno %d", (void *)mixed, errno);
	struct ibv_comp_channel *chb = ibv_create_comp_channel(b.ctx);
	errno = 0;
	struct ibv_cq *cqx = ibv_create_cq(a.ctx, 4, NULL, chb, 0);
	CHECK("cq_with_channel_of_other_context", !cqx && errno == EINVAL, "cq %p errno %d", (void *)cqx, errno);
	struct ibv_srq_init_attr sa_attr = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(b.pd, &sa_attr);
	struct ibv_qp_init_attr qs = { .send_cq = a.cq, .recv_cq = a.cq, .srq = srq,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 }, .qp_type = IBV_QPT_RC };
	errno = 0;
	struct ibv_qp *withsrq = ibv_create_qp(a.pd, &qs);
	CHECK("qp_with_srq_of_other_context", srq && !withsrq && errno == EINVAL, "srq %p qp %p errno %d",
	      (void *)srq, (void *)withsrq, errno);
	struct ibv_qp_init_attr_ex qx = { .send_cq = a.cq, .recv_cq = a.cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = b.pd };
	errno = 0;
	struct ibv_qp *qpx = ibv_create_qp_ex(a.ctx, &qx);
	CHECK("qp_ex_pd_of_other_context", !qpx && errno == EINVAL, "qp %p errno %d", (void *)qpx, errno);
	/* B's key does not open B's region through A's QP, of another PD. */
	struct ibv_sge xg = { .addr = (uintptr_t)b.buf, .length = 8, .lkey = b.mr->lkey };
	struct ibv_send_wr xw = { .wr_id = 2, .sg_list = &xg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED }, *xbad;
	xw.wr.rdma.remote_addr = (uintptr_t)b.buf;
	xw.wr.rdma.rkey = b.mr->rkey;
	int x = ibv_post_send(b.qp, &xw, &xbad) ? -3 : one(b.cq, &wc);
	CHECK("rkey_of_other_pd", x == IBV_WC_REM_ACCESS_ERR, "status %d", x);

	/* Asynchronous events reach the context whose object they name: B's
	 * QP met a remote access error above and is fatal now (A's QP, which
	 * refused the access, may have an event of its own on A). */
	int b_fatal = 0, wrong = 0, seen = 0;
	double end = now() + 2;
	while (now() < end && !(b_fatal && seen >= 2)) {
		struct side *sides[2] = { &a, &b };
		for (int k = 0; k < 2; k++) {
			struct pollfd p = { .fd = sides[k]->ctx->async_fd, .events = POLLIN };
			struct ibv_async_event ev = { 0 };
			if (poll(&p, 1, 50) != 1 || ibv_get_async_event(sides[k]->ctx, &ev))
				continue;
			seen++;
			if (ev.element.qp != sides[k]->qp)
				wrong++;
			if (k == 1 && ev.event_type == IBV_EVENT_QP_FATAL)
				b_fatal = 1;
			ibv_ack_async_event(&ev);
		}
	}
	CHECK("async_event_to_owner", b_fatal && !wrong, "B's QP fatal event: %d; %d of %d events on the "
	      "other context", b_fatal, wrong, seen);

	/* Closing A leaves B's context working. */
	ibv_destroy_qp(a.qp);
	ibv_dereg_mr(a.mr);
	ibv_destroy_cq(a.cq);
	ibv_dealloc_pd(a.pd);
	int closed = ibv_close_device(a.ctx);
	struct ibv_cq *cq2 = ibv_create_cq(b.ctx, 8, NULL, NULL, 0);
	struct ibv_qp *q1 = rc_qp(&b, cq2), *q2 = rc_qp(&b, cq2);
	int conn = q1 && q2 && !connect_qp(q1, q2->qp_num, b.gid) && !connect_qp(q2, q1->qp_num, b.gid);
	struct ibv_sge lg = { .addr = (uintptr_t)b.buf + 64, .length = 8, .lkey = b.mr->lkey };
	struct ibv_send_wr lw = { .wr_id = 3, .sg_list = &lg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED }, *lbad;
	lw.wr.rdma.remote_addr = (uintptr_t)b.buf + 3000;
	lw.wr.rdma.rkey = b.mr->rkey;
	int l = conn && !ibv_post_send(q1, &lw, &lbad) ? one(cq2, &wc) : -3;
	CHECK("other_context_after_close", closed == 0 && l == IBV_WC_SUCCESS, "close %d write %d", closed, l);
	ibv_free_device_list(list);
	return failures;
}
