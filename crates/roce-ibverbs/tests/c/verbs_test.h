/*
 * What the C test programs share: the CHECK line format ("ok NAME" or
 * "FAIL NAME: why", failures counted), the first device's context, PD
 * and GID, and RC QPs connected on that one GID (sgid_index selects the
 * source GID; 0 unless a program sets it).
 */
#ifndef ROCE_VERBS_TEST_H
#define ROCE_VERBS_TEST_H

#include <errno.h>
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

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static long page __attribute__((unused));
static uint8_t sgid_index __attribute__((unused));

/* The first device's context and a PD into ctx and pd; exits with 100
 * (set-up failed) when there is none. */
static inline void open_first_device(void) {
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) { printf("FAIL setup: no device\n"); exit(100); }
	ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx) { printf("FAIL setup: open: %s\n", strerror(errno)); exit(100); }
	pd = ibv_alloc_pd(ctx);
}

static inline double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* One completion within 5 s, or status -1. */
static inline int one(struct ibv_cq *cq, struct ibv_wc *wc) {
	double end = now() + 5;
	while (now() < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0) return -2;
		if (n == 1) return wc->status;
	}
	return -1;
}

static inline struct ibv_qp *rc_qp(struct ibv_cq *cq) {
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	return ibv_create_qp(pd, &a);
}

static inline int connect_qp(struct ibv_qp *qp, uint32_t dest) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 1;
	a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.sgid_index = sgid_index; a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 1; a.rnr_retry = 1; a.sq_psn = 1; a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* A connected RC QP on `cq` towards a fresh peer QP, whose own CQ is made here. */
static inline struct ibv_qp *requester(struct ibv_cq *cq) {
	struct ibv_cq *peer_cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a = rc_qp(cq), *b = rc_qp(peer_cq);
	if (!a || !b || connect_qp(a, b->qp_num) || connect_qp(b, a->qp_num)) {
		printf("FAIL setup: cannot connect a QP pair (%s)\n", strerror(errno));
		exit(100);
	}
	return a;
}

static inline int write_to(struct ibv_qp *qp, struct ibv_mr *src, uint64_t addr, uint32_t rkey) {
	struct ibv_sge s = { .addr = (uintptr_t)src->addr, .length = 64, .lkey = src->lkey };
	struct ibv_send_wr w = { .wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.rdma.remote_addr = addr; w.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &w, &bad);
}

#endif
