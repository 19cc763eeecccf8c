/*
 * Registered memory the program takes away under the engine (issue 33):
 * freed, unmapped behind the library's back, shrunk with mremap or
 * protected with mprotect. A peer's WRITE, READ or atomic into it gets a
 * remote access error, a SEND gathering from it a local protection
 * error, a SEND landing in it an error on both sides — never a signal in
 * this process. Registration checks the pages as the kernel's pinning
 * does (EFAULT), and a SIGSEGV handler the program installed still gets
 * the program's own faults, before and after the library's.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; the exit status is the
 * number of failures. Built and run by tests/memory.rs.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "verbs_test.h"

#define BIG (8u << 20)
#define ALL_REMOTE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* Unmaps as glibc's free() does for a large block: the system call
 * itself, which the library's munmap never sees. */
static void unmap_behind(void *p, size_t len) {
	syscall(SYS_munmap, p, len);
}

/* Whether the page at p is mapped (msync fails with ENOMEM on a hole). */
static int mapped(void *p) {
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1);
	return msync((void *)a, page, MS_ASYNC) == 0;
}

static void *map(size_t len) {
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) { printf("FAIL setup: mmap\n"); exit(100); }
	memset(p, 0, len);
	return p;
}

/* A connected RC pair, both QPs granting every remote right. */
static struct ibv_cq *acq, *bcq;
static struct ibv_qp *aqp, *bqp;

static int bring_up(struct ibv_qp *qp, uint32_t dest) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 1;
	a.max_dest_rd_atomic = 4; a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 1; a.rnr_retry = 1; a.sq_psn = 1; a.max_rd_atomic = 4;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* A fresh pair (an access error leaves the last one in the error state). */
static void new_pair(void) {
	if (!acq) {
		acq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
		bcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	}
	aqp = rc_qp(acq);
	bqp = rc_qp(bcq);
	if (!aqp || !bqp || bring_up(aqp, bqp->qp_num) || bring_up(bqp, aqp->qp_num)) {
		printf("FAIL setup: cannot connect a QP pair (%s)\n", strerror(errno));
		exit(100);
	}
}

/* Posts one signaled work request of `op` on aqp from/to `local` (len
 * bytes) with the remote address and rkey; returns the status of its
 * completion (-1: none within 5 s). */
static int rdma(enum ibv_wr_opcode op, struct ibv_mr *local, uint32_t len, void *raddr, uint32_t rkey) {
	struct ibv_sge s = { .addr = (uintptr_t)local->addr, .length = len, .lkey = local->lkey };
	struct ibv_send_wr w = { .wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		w.wr.atomic.remote_addr = (uintptr_t)raddr; w.wr.atomic.rkey = rkey; w.wr.atomic.compare_add = 1;
	} else {
		w.wr.rdma.remote_addr = (uintptr_t)raddr; w.wr.rdma.rkey = rkey;
	}
	if (ibv_post_send(aqp, &w, &bad))
		return -3;
	struct ibv_wc wc;
	return one(acq, &wc);
}

static int post_recv(struct ibv_qp *qp, struct ibv_mr *mr, uint32_t len) {
	struct ibv_sge s = { .addr = (uintptr_t)mr->addr, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr r = { .wr_id = 9, .sg_list = &s, .num_sge = 1 }, *bad;
	return ibv_post_recv(qp, &r, &bad);
}

/* The program's own SIGSEGV handler, installed before the library's. */
static sigjmp_buf back;
static volatile sig_atomic_t mine_ran;
static void mine(int sig, siginfo_t *info, void *uc) {
	(void)sig; (void)info; (void)uc;
	mine_ran++;
	siglongjmp(back, 1);
}

/* Faults on a PROT_NONE page itself; true when `mine` caught it. */
static int own_fault_caught(void) {
	char *p = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int before = mine_ran;
	if (sigsetjmp(back, 1) == 0) {
		volatile char c = *(volatile char *)p;
		(void)c;
	}
	munmap(p, page);
	return mine_ran == before + 1;
}

static void install_mine(void) {
	struct sigaction sa = { 0 };
	sa.sa_sigaction = mine;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
}

/* With an argument N, only case N runs (for checking a case alone, on
 * this library or another). */
static int only;
#define CASE(n) if (!only || only == (n))

int main(int argc, char **argv) {
	int rc;
	struct ibv_wc wc;
	only = argc > 1 ? atoi(argv[1]) : 0;
	page = sysconf(_SC_PAGESIZE);
	install_mine();
	open_first_device();
	ibv_query_gid(ctx, 1, 0, &gid);

	/* The requester's own memory, for every case. */
	char *src = map(page);
	memset(src, 0x5a, page);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, page, IBV_ACCESS_LOCAL_WRITE);
	if (!smr) { printf("FAIL setup: reg src\n"); return 100; }

	CASE(1) {
		/* 1. An 8 MiB block from malloc, freed while registered: glibc
		 * unmaps it with its internal munmap. A peer's WRITE into it. */
		new_pair();
		char *big = malloc(BIG);
		struct ibv_mr *bmr = ibv_reg_mr(pd, big, BIG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		rc = rdma(IBV_WR_RDMA_WRITE, smr, 64, big + BIG / 2, bmr ? bmr->rkey : 0);
		CHECK("write_before_free", bmr && rc == IBV_WC_SUCCESS && big[BIG / 2] == 0x5a, "status %d", rc);
		/* The address, kept as a number: the point is to use it after free(). */
		uintptr_t gone = (uintptr_t)big + BIG / 2;
		free(big);
		/* The case holds only if free() did unmap it. */
		CHECK("free_unmapped", !mapped((void *)gone), "free() kept the block mapped");
		rc = rdma(IBV_WR_RDMA_WRITE, smr, 64, (void *)gone, bmr->rkey);
		CHECK("write_after_free", rc == IBV_WC_REM_ACCESS_ERR, "status %d", rc);
		CHECK("dereg_after_free", ibv_dereg_mr(bmr) == 0, "dereg failed");
	}

	CASE(2) {
		/* 2. mremap shrinking a registered region to one page. */
		new_pair();
		char *m = map(BIG);
		struct ibv_mr *mmr = ibv_reg_mr(pd, m, BIG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		void *r = mremap(m, BIG, page, 0);
		rc = rdma(IBV_WR_RDMA_WRITE, smr, 64, m + BIG / 2, mmr ? mmr->rkey : 0);
		CHECK("write_after_mremap", r == m && rc == IBV_WC_REM_ACCESS_ERR, "status %d", rc);
		ibv_dereg_mr(mmr);
		munmap(m, page);
	}

	CASE(3) {
		/* 3. mprotect(PROT_NONE) on a registered region. */
		new_pair();
		char *pn = map(16 * page);
		struct ibv_mr *pmr = ibv_reg_mr(pd, pn, 16 * page, ALL_REMOTE);
		mprotect(pn, 16 * page, PROT_NONE);
		rc = rdma(IBV_WR_RDMA_WRITE, smr, 64, pn + 4 * page, pmr ? pmr->rkey : 0);
		CHECK("write_after_mprotect", rc == IBV_WC_REM_ACCESS_ERR, "status %d", rc);
		ibv_dereg_mr(pmr);
	}

	CASE(4) {
		/* 4. A READ from a PROT_NONE'd source. */
		new_pair();
		char *rs = map(16 * page);
		struct ibv_mr *rmr = ibv_reg_mr(pd, rs, 16 * page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
		mprotect(rs, 16 * page, PROT_NONE);
		rc = rdma(IBV_WR_RDMA_READ, smr, 64, rs + page, rmr ? rmr->rkey : 0);
		CHECK("read_after_mprotect", rc == IBV_WC_REM_ACCESS_ERR, "status %d", rc);
		ibv_dereg_mr(rmr);
	}

	CASE(5) {
		/* 5. A SEND whose gather source was unmapped behind the library. */
		new_pair();
		char *land = map(page);
		struct ibv_mr *lmr = ibv_reg_mr(pd, land, page, IBV_ACCESS_LOCAL_WRITE);
		char *gs = map(4 * page);
		struct ibv_mr *gmr = ibv_reg_mr(pd, gs, 4 * page, IBV_ACCESS_LOCAL_WRITE);
		post_recv(bqp, lmr, page);
		unmap_behind(gs, 4 * page);
		rc = rdma(IBV_WR_SEND, gmr, 64, NULL, 0);
		CHECK("send_from_unmapped", rc == IBV_WC_LOC_PROT_ERR, "status %d", rc);
		ibv_dereg_mr(gmr);
	}

	CASE(6) {
		/* 6. A receive whose target was unmapped before the peer's SEND
		 * arrives: a local protection error on the receive, the NAK's
		 * remote operational error at the sender. */
		new_pair();
		char *rt = map(4 * page);
		struct ibv_mr *tmr = ibv_reg_mr(pd, rt, 4 * page, IBV_ACCESS_LOCAL_WRITE);
		post_recv(bqp, tmr, 4 * page);
		unmap_behind(rt, 4 * page);
		rc = rdma(IBV_WR_SEND, smr, 64, NULL, 0);
		int rrc = one(bcq, &wc);
		CHECK("recv_into_unmapped", rrc == IBV_WC_LOC_PROT_ERR && rc == IBV_WC_REM_OP_ERR,
		      "receive %d send %d", rrc, rc);
		ibv_dereg_mr(tmr);
	}

	CASE(7) {
		/* 7. An atomic into an unmapped target. */
		new_pair();
		char *at = map(page);
		struct ibv_mr *amr = ibv_reg_mr(pd, at, page, ALL_REMOTE);
		rc = rdma(IBV_WR_ATOMIC_FETCH_AND_ADD, smr, 8, at + 64, amr ? amr->rkey : 0);
		CHECK("atomic_mapped", rc == IBV_WC_SUCCESS && at[64] == 1, "status %d value %d", rc, at[64]);
		unmap_behind(at, page);
		rc = rdma(IBV_WR_ATOMIC_FETCH_AND_ADD, smr, 8, at + 64, amr->rkey);
		CHECK("atomic_after_unmap", rc == IBV_WC_REM_ACCESS_ERR, "status %d", rc);
		ibv_dereg_mr(amr);
	}

	CASE(8) {
		/* 8. Registration checks the pages as pinning does. */
		char *ro = map(2 * page);
		mprotect(ro, 2 * page, PROT_READ);
		errno = 0;
		CHECK("reg_write_over_readonly", ibv_reg_mr(pd, ro, 2 * page, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EFAULT,
		      "errno %d", errno);
		errno = 0;
		CHECK("reg_remote_write_over_readonly",
		      ibv_reg_mr(pd, ro, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EFAULT,
		      "errno %d", errno);
		struct ibv_mr *rom = ibv_reg_mr(pd, ro, 2 * page, 0);
		CHECK("reg_readonly_over_readonly", rom != NULL, "errno %d", errno);
		ibv_dereg_mr(rom);
		struct ibv_mr *rrm = ibv_reg_mr(pd, ro, 2 * page, IBV_ACCESS_REMOTE_READ);
		CHECK("reg_remote_read_over_readonly", rrm != NULL, "errno %d", errno);
		ibv_dereg_mr(rrm);
		mprotect(ro + page, page, PROT_NONE);
		errno = 0;
		CHECK("reg_readonly_over_none", ibv_reg_mr(pd, ro, 2 * page, 0) == NULL && errno == EFAULT,
		      "errno %d", errno);
		char *wo = map(page);
		mprotect(wo, page, PROT_WRITE);
		errno = 0;
		CHECK("reg_over_write_only", ibv_reg_mr(pd, wo, page, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EFAULT,
		      "errno %d", errno);
	}

	CASE(9) {
		/* 9. The program's handler, installed before the library's, still
		 * gets the program's own faults. */
		CHECK("own_fault_chained", own_fault_caught(), "the program's handler did not run");
	}

	CASE(10) {
		/* 10. A handler the program installs after registering replaces the
		 * library's; the next registration puts the library's back, chained
		 * to it: a peer's WRITE into protected memory is an access error
		 * again, and the program's own fault still reaches its handler. */
		install_mine();
		char *again = map(page);
		struct ibv_mr *gm = ibv_reg_mr(pd, again, page, ALL_REMOTE);
		mprotect(again, page, PROT_NONE);
		new_pair();
		rc = rdma(IBV_WR_RDMA_WRITE, smr, 64, again, gm ? gm->rkey : 0);
		CHECK("reinstalled_at_registration", rc == IBV_WC_REM_ACCESS_ERR, "status %d", rc);
		CHECK("own_fault_after_reinstall", own_fault_caught(), "the program's handler did not run");
	}

	printf("alive\n");
	return failures;
}
