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

#include "verbs_test.h"

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
	open_first_device();
	ibv_query_gid(ctx, 1, 0, &gid);
	page = sysconf(_SC_PAGESIZE);
	rereg();
	resize();
	return failures;
}
