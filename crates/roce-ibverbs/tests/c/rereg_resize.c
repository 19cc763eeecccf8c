/*
 * ibv_rereg_mr and ibv_resize_cq from C, as a program uses them: data a
 * peer writes through a re-registered region lands in its new memory
 * under the same rkey, the old memory can be freed, new rights and a
 * new PD apply, each error comes back as rdma-core returns it; a CQ
 * grown past its first size holds more completions, and one cannot be
 * shrunk below the completions waiting.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; the exit status is the
 * number of failures. Built and run by tests/rereg_resize.rs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
static long page;

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* One completion within 5 s, or status -1. */
static int one(struct ibv_cq *cq, struct ibv_wc *wc) {
	double end = now() + 5;
	while (now() < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0) return -2;
		if (n == 1) return wc->status;
	}
	return -1;
}

static struct ibv_qp *rc_qp(struct ibv_cq *cq) {
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	return ibv_create_qp(pd, &a);
}

static int connect_qp(struct ibv_qp *qp, uint32_t dest) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 1;
	a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 1; a.rnr_retry = 1; a.sq_psn = 1; a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* A connected RC QP on `cq` towards a fresh peer QP, whose own CQ is made here. */
static struct ibv_qp *requester(struct ibv_cq *cq) {
	struct ibv_cq *peer_cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a = rc_qp(cq), *b = rc_qp(peer_cq);
	if (!a || !b || connect_qp(a, b->qp_num) || connect_qp(b, a->qp_num)) {
		printf("FAIL setup: cannot connect a QP pair (%s)\n", strerror(errno));
		exit(100);
	}
	return a;
}

static int write_to(struct ibv_qp *qp, struct ibv_mr *src, uint64_t addr, uint32_t rkey) {
	struct ibv_sge s = { .addr = (uintptr_t)src->addr, .length = 64, .lkey = src->lkey };
	struct ibv_send_wr w = { .wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.rdma.remote_addr = addr; w.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &w, &bad);
}

/* A WRITE of 64 bytes of `src` to (addr, rkey) on a new pair: its status. */
static int write_status(struct ibv_mr *src, uint64_t addr, uint32_t rkey) {
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = requester(cq);
	struct ibv_wc wc;
	if (write_to(qp, src, addr, rkey))
		return -3;
	return one(cq, &wc);
}

static void *pages(int n) {
	return mmap(NULL, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

static void rereg(void) {
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	char *src = malloc(page);
	memset(src, 0x6b, page);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, page, IBV_ACCESS_LOCAL_WRITE);
	char *old = pages(1), *new = pages(2);
	struct ibv_mr *mr = ibv_reg_mr(pd, old, page, rw);
	uint32_t lkey = mr->lkey, rkey = mr->rkey;

	/* New memory: the same keys, the new range in the ibv_mr. */
	int rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, new, 2 * page, 0);
	CHECK("rereg_translation", rc == 0 && mr->addr == new && mr->length == 2 * page &&
	      mr->lkey == lkey && mr->rkey == rkey,
	      "rc %d addr %p length %zu keys %x/%x were %x/%x", rc, mr->addr, mr->length,
	      mr->lkey, mr->rkey, lkey, rkey);
	/* The old memory is the program's again: unmapping it revokes nothing. */
	munmap(old, page);
	rc = write_status(smr, (uintptr_t)new + page, rkey);
	CHECK("rereg_write_lands_in_new_memory", rc == IBV_WC_SUCCESS && new[page] == 0x6b &&
	      new[page + 63] == 0x6b && new[0] == 0, "status %d bytes %d %d", rc, new[page], new[0]);
	rc = write_status(smr, (uintptr_t)old, rkey);
	CHECK("rereg_old_range_refused", rc == IBV_WC_REM_ACCESS_ERR, "status %d", rc);

	/* Input errors libibverbs finds: IBV_REREG_MR_ERR_INPUT, EINVAL. */
	errno = 0;
	rc = ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0);
	CHECK("rereg_unknown_flag", rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "rc %d errno %d", rc, errno);
	errno = 0;
	rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, new, 0, 0);
	CHECK("rereg_zero_length", rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "rc %d errno %d", rc, errno);
	errno = 0;
	rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	CHECK("rereg_access_without_flag", rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "rc %d errno %d", rc, errno);

	/* What the kernel refuses: IBV_REREG_MR_ERR_CMD, with its errno. */
	errno = 0;
	rc = ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0);
	CHECK("rereg_no_flag", rc == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "rc %d errno %d", rc, errno);
	errno = 0;
	rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE);
	CHECK("rereg_invalid_rights", rc == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "rc %d errno %d", rc, errno);
	errno = 0;
	rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0);
	CHECK("rereg_null_pd", rc == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "rc %d errno %d", rc, errno);
	char *hole = pages(2);
	munmap(hole + page, page);
	errno = 0;
	rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, hole, 2 * page, 0);
	CHECK("rereg_unmapped", rc == IBV_REREG_MR_ERR_CMD && errno == EFAULT, "rc %d errno %d", rc, errno);
	/* None of them changed the region. */
	new[page] = 0;
	rc = write_status(smr, (uintptr_t)new + page, rkey);
	CHECK("rereg_errors_change_nothing", rc == IBV_WC_SUCCESS && new[page] == 0x6b &&
	      mr->addr == new && mr->pd == pd, "status %d byte %d", rc, new[page]);

	/* New rights: a remote WRITE is refused from now on. */
	rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	int st = write_status(smr, (uintptr_t)new, rkey);
	CHECK("rereg_access", rc == 0 && st == IBV_WC_REM_ACCESS_ERR, "rc %d status %d", rc, st);

	/* A new PD: the ibv_mr names it, and it is in use. */
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd2, NULL, 0, rw);
	int busy = ibv_dealloc_pd(pd2);
	st = write_status(smr, (uintptr_t)new, rkey);
	CHECK("rereg_pd", rc == 0 && mr->pd == pd2 && busy == EBUSY && st == IBV_WC_REM_ACCESS_ERR,
	      "rc %d pd %p busy %d status %d", rc, (void *)mr->pd, busy, st);
	rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0);
	st = write_status(smr, (uintptr_t)new, rkey);
	CHECK("rereg_pd_back", rc == 0 && st == IBV_WC_SUCCESS && ibv_dealloc_pd(pd2) == 0,
	      "rc %d status %d", rc, st);
	CHECK("rereg_dereg", ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(smr) == 0, "dereg failed");
}

static void resize(void) {
	char *src = malloc(page), *dst = malloc(page);
	memset(src, 0x3c, page);
	memset(dst, 0, page);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, page, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 2, NULL, NULL, 0);
	struct ibv_qp *qp = requester(cq);
	int rc = ibv_resize_cq(cq, 8);
	CHECK("resize_grow", rc == 0 && cq->cqe == 8, "rc %d cqe %d", rc, cq->cqe);
	/* Six completions in a CQ created for two, none polled until all are in. */
	for (int i = 0; i < 6; i++)
		write_to(qp, smr, (uintptr_t)dst + 64 * i, dmr->rkey);
	double end = now() + 5;
	while (dst[64 * 5 + 63] != 0x3c && now() < end)
		usleep(1000);
	usleep(200000);
	rc = ibv_resize_cq(cq, 5);
	CHECK("resize_below_waiting", rc == EINVAL && cq->cqe == 8, "rc %d cqe %d", rc, cq->cqe);
	struct ibv_wc wc[8];
	int n = 0, ok = 0;
	end = now() + 5;
	while (n < 6 && now() < end) {
		int k = ibv_poll_cq(cq, 8, wc);
		if (k < 0) break;
		for (int i = 0; i < k; i++) ok += wc[i].status == IBV_WC_SUCCESS;
		n += k;
	}
	CHECK("resize_holds_more", n == 6 && ok == 6, "%d completions, %d successful", n, ok);
	rc = ibv_resize_cq(cq, 1);
	CHECK("resize_shrink", rc == 0 && cq->cqe == 1, "rc %d cqe %d", rc, cq->cqe);
	CHECK("resize_zero", ibv_resize_cq(cq, 0) == EINVAL && cq->cqe == 1, "not EINVAL");
	struct ibv_device_attr da;
	ibv_query_device(ctx, &da);
	CHECK("resize_past_max", ibv_resize_cq(cq, da.max_cqe + 1) == EINVAL, "not EINVAL");
}

int main(void) {
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) { printf("FAIL setup: no device\n"); return 100; }
	ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx) { printf("FAIL setup: open: %s\n", strerror(errno)); return 100; }
	pd = ibv_alloc_pd(ctx);
	ibv_query_gid(ctx, 1, 0, &gid);
	page = sysconf(_SC_PAGESIZE);
	rereg();
	resize();
	return failures;
}
