/*
 * Bad input and hostile use of the drop-in libibverbs, from C as a
 * program would do it: NULL handles, objects destroyed while in use,
 * posting in the wrong state, registering unmapped memory, unmapping
 * registered memory under a remote WRITE, a CQ overflow, fork() after
 * registration, and an exit with every object still alive.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; the exit status is the
 * number of failures. Built and run by tests/abuse.rs.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "verbs_test.h"

/* Two connected RC QPs on one CQ each. */
static void pair(struct ibv_cq **ca, struct ibv_qp **a, struct ibv_cq **cb, struct ibv_qp **b) {
	*ca = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	*cb = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	*a = rc_qp(*ca);
	*b = rc_qp(*cb);
	if (!*a || !*b || connect_qp(*a, (*b)->qp_num) || connect_qp(*b, (*a)->qp_num)) {
		printf("FAIL setup: cannot connect a QP pair (%s)\n", strerror(errno));
		exit(100);
	}
}

int main(void) {
	int n = 0;
	open_first_device();
	ibv_query_gid(ctx, 1, 0, &gid);
	long page = sysconf(_SC_PAGESIZE);

	/* NULL handles: an error, not a crash. */
	CHECK("null_dealloc_pd", ibv_dealloc_pd(NULL) == EINVAL, "got something else");
	CHECK("null_destroy_qp", ibv_destroy_qp(NULL) == EINVAL, "got something else");
	CHECK("null_destroy_cq", ibv_destroy_cq(NULL) == EINVAL, "got something else");
	errno = 0;
	CHECK("null_open_device", ibv_open_device(NULL) == NULL && errno == EINVAL, "errno %d", errno);
	errno = 0;
	CHECK("null_reg_mr_pd", ibv_reg_mr(NULL, &n, 4, 0) == NULL && errno == EINVAL, "errno %d", errno);

	/* Objects in use: EBUSY, as the kernel answers. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	struct ibv_qp *qp = rc_qp(cq);
	char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK("busy_pd", ibv_dealloc_pd(pd) == EBUSY, "dealloc of a PD with an MR and a QP did not say EBUSY");
	CHECK("busy_cq", ibv_destroy_cq(cq) == EBUSY, "destroy of a CQ with a QP did not say EBUSY");
	CHECK("busy_channel", ibv_destroy_comp_channel(ch) == EBUSY, "destroy of a channel with a CQ did not say EBUSY");

	/* Posting to a QP in RESET: EINVAL, and bad_wr names the WR. */
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	int rc = ibv_post_send(qp, &w, &bad);
	CHECK("post_in_reset", rc == EINVAL && bad == &w, "rc %d bad %p", rc, (void *)bad);
	CHECK("destroy_in_order", ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 &&
	      ibv_destroy_comp_channel(ch) == 0 && ibv_dereg_mr(mr) == 0, "teardown failed");

	/* Registering memory that is not mapped: EFAULT, as the kernel's pinning. */
	char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(two + page, page);
	errno = 0;
	CHECK("reg_unmapped", ibv_reg_mr(pd, two, 2 * page, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EFAULT,
	      "errno %d", errno);
	munmap(two, page);

	/* A registered region unmapped under a peer's RDMA WRITE: the WRITE
	 * fails with a remote access error, nothing faults. */
	struct ibv_cq *ca, *cb;
	struct ibv_qp *a, *b;
	pair(&ca, &a, &cb, &b);
	char *src = malloc(page);
	memset(src, 0x5a, page);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, page, IBV_ACCESS_LOCAL_WRITE);
	char *dst = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_wc wc;
	write_to(a, smr, (uintptr_t)dst, dmr->rkey);
	rc = one(ca, &wc);
	CHECK("write_mapped", rc == IBV_WC_SUCCESS && dst[0] == 0x5a, "status %d byte %d", rc, dst[0]);
	munmap(dst, page);
	write_to(a, smr, (uintptr_t)dst, dmr->rkey);
	rc = one(ca, &wc);
	CHECK("write_after_unmap", rc == IBV_WC_REM_ACCESS_ERR, "status %d", rc);
	CHECK("dereg_after_unmap", ibv_dereg_mr(dmr) == 0, "dereg failed");

	/* fork() after registration: the child leaves, the parent's verbs go on. */
	struct ibv_cq *fa, *fb;
	struct ibv_qp *x, *y;
	pair(&fa, &x, &fb, &y);
	char *land = malloc(page);
	struct ibv_mr *lmr = ibv_reg_mr(pd, land, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	int st = -1;
	waitpid(pid, &st, 0);
	write_to(x, smr, (uintptr_t)land, lmr->rkey);
	rc = one(fa, &wc);
	CHECK("fork_then_write", st == 0 && rc == IBV_WC_SUCCESS && land[63] == 0x5a, "child %d status %d", st, rc);

	/* A CQ overflow raises IBV_EVENT_CQ_ERR. */
	struct ibv_cq *tiny = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	struct ibv_cq *rq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = tiny, .recv_cq = rq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	struct ibv_qp *o = ibv_create_qp(pd, &ia);
	struct ibv_cq *pc = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *p = rc_qp(pc);
	if (!o || !p || connect_qp(o, p->qp_num) || connect_qp(p, o->qp_num)) {
		printf("FAIL setup: overflow pair\n");
		return 100;
	}
	for (int i = 0; i < 8; i++)
		write_to(o, smr, (uintptr_t)land, lmr->rkey);
	/* Earlier events come first (the QP that met the remote access
	 * error is fatal): take events until the CQ's, within 5 s. */
	struct pollfd pf = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev = { 0 };
	int got = 0, seen = 0;
	double end = now() + 5;
	while (!got && now() < end && poll(&pf, 1, 1000) == 1) {
		if (ibv_get_async_event(ctx, &ev))
			break;
		seen++;
		got = ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == tiny;
		ibv_ack_async_event(&ev);
	}
	CHECK("cq_overflow_event", got, "%d events, none CQ_ERR of the overflowed CQ", seen);

	/* Exit with every object still alive: the process must end. */
	return failures;
}
