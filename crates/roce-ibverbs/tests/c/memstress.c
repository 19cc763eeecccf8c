/*
 * Stress (issue 33, item 6): for about 5 s, two threads post RDMA WRITEs
 * and poll completions on one QP while a third registers buffers,
 * publishes their keys, and takes them away again in every way a
 * program can — free() of a block glibc unmaps, munmap behind the
 * library's back, munmap through it, mprotect(PROT_NONE), or a clean
 * deregistration first — and the peer QP (in this process) has the
 * WRITEs land in them. No signal, no hang: every WR posted completes,
 * with SUCCESS, a remote access error, or a flush after one.
 *
 * A remote access error puts the QP in the error state, so the run is a
 * series of rounds, each on a fresh QP pair.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; the exit status is the
 * number of failures. Built and run by tests/memory.rs.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "verbs_test.h"

#define SLOTS 8
#define BUF (256u << 10)
#define DEPTH 48

struct slot {
	char *addr;
	uint32_t rkey;
};

static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[SLOTS];
static atomic_int stop_churn;
static atomic_long churned;

/* This round's QP and its accounting. */
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static char *src;
static struct ibv_mr *smr;
static atomic_long posted, completed, ok_wc, access_wc, flush_wc, other_wc;
static atomic_int posters_done, saw_error, hung;
static double round_end;

static int bring_up(struct ibv_qp *q, uint32_t dest) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 1;
	a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = 1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 1; a.max_rd_atomic = 1;
	return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void poll_some(void) {
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(cq, 16, wc);
	for (int i = 0; i < n; i++) {
		switch (wc[i].status) {
		case IBV_WC_SUCCESS: ok_wc++; break;
		case IBV_WC_REM_ACCESS_ERR: access_wc++; saw_error = 1; break;
		case IBV_WC_WR_FLUSH_ERR: flush_wc++; saw_error = 1; break;
		default:
			other_wc++; saw_error = 1;
			printf("# unexpected status %d (%s)\n", wc[i].status, ibv_wc_status_str(wc[i].status));
		}
	}
	if (n > 0)
		completed += n;
}

/* One of the two threads that post WRITEs to the published buffers and
 * poll the shared CQ. */
static void *poster(void *arg) {
	unsigned seed = (unsigned)(uintptr_t)arg;
	while (now() < round_end && !saw_error) {
		if (posted - completed >= DEPTH) {
			poll_some();
			continue;
		}
		int i = rand_r(&seed) % SLOTS;
		pthread_mutex_lock(&slots_lock);
		struct slot s = slots[i];
		pthread_mutex_unlock(&slots_lock);
		if (!s.addr)
			continue;
		uint32_t len = 64 + rand_r(&seed) % 4096;
		struct ibv_sge sg = { .addr = (uintptr_t)src, .length = len, .lkey = smr->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &sg, .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
		w.wr.rdma.remote_addr = (uintptr_t)s.addr + rand_r(&seed) % (BUF - len);
		w.wr.rdma.rkey = s.rkey;
		/* Counted first: the other thread may poll its completion
		 * before this one returns from posting. */
		posted++;
		if (ibv_post_send(qp, &w, &bad))
			posted--;
		poll_some();
	}
	posters_done++;
	/* Drain: both threads poll until every WR posted has completed. */
	double end = now() + 10;
	while (!(posters_done == 2 && completed == posted)) {
		if (now() > end) { hung = 1; break; }
		poll_some();
	}
	return NULL;
}

/* Registers, publishes, then takes away buffers, round after round. */
static void *churn(void *arg) {
	(void)arg;
	struct ibv_mr *mrs[SLOTS] = { 0 };
	int kind[SLOTS] = { 0 };
	unsigned seed = 99;
	for (long n = 0; !stop_churn; n++) {
		int i = n % SLOTS;
		if (mrs[i]) {
			char *p = mrs[i]->addr;
			/* Half the time the keys stay published while the memory
			 * goes: a WRITE may be on its way. */
			int unpublish_first = rand_r(&seed) % 2;
			if (unpublish_first) {
				pthread_mutex_lock(&slots_lock);
				slots[i].addr = NULL;
				pthread_mutex_unlock(&slots_lock);
			}
			switch (kind[i]) {
			case 0: /* free() before deregistering (glibc unmaps it) */
				free(p);
				ibv_dereg_mr(mrs[i]);
				break;
			case 1: /* unmapped behind the library */
				syscall(SYS_munmap, p, BUF);
				ibv_dereg_mr(mrs[i]);
				break;
			case 2: /* unmapped through it (revoked first) */
				munmap(p, BUF);
				ibv_dereg_mr(mrs[i]);
				break;
			case 3: /* protected, then deregistered, then unmapped */
				mprotect(p, BUF, PROT_NONE);
				ibv_dereg_mr(mrs[i]);
				munmap(p, BUF);
				break;
			default: /* clean */
				ibv_dereg_mr(mrs[i]);
				munmap(p, BUF);
			}
			if (!unpublish_first) {
				pthread_mutex_lock(&slots_lock);
				slots[i].addr = NULL;
				pthread_mutex_unlock(&slots_lock);
			}
			mrs[i] = NULL;
		}
		kind[i] = rand_r(&seed) % 5;
		char *p = kind[i] == 0 ? malloc(BUF)
			: mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		mrs[i] = ibv_reg_mr(pd, p, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!mrs[i]) {
			printf("# registration failed: %s\n", strerror(errno));
			kind[i] == 0 ? free(p) : (void)munmap(p, BUF);
			continue;
		}
		pthread_mutex_lock(&slots_lock);
		slots[i].addr = p;
		slots[i].rkey = mrs[i]->rkey;
		pthread_mutex_unlock(&slots_lock);
		churned++;
		usleep(200 + rand_r(&seed) % 2000);
	}
	for (int i = 0; i < SLOTS; i++) {
		if (mrs[i]) {
			char *p = mrs[i]->addr;
			ibv_dereg_mr(mrs[i]);
			kind[i] == 0 ? free(p) : (void)munmap(p, BUF);
		}
	}
	return NULL;
}

int main(void) {
	/* malloc(BUF) always from its own mapping, which free() unmaps
	 * (a fixed threshold does not grow past it), and the library's own
	 * smaller blocks from the heap: a hole free() leaves is not filled
	 * by the engine's memory before the region is deregistered (a WRITE
	 * in flight would land there; docs/dropin.md says why). */
	mallopt(M_MMAP_THRESHOLD, 192 << 10);
	page = sysconf(_SC_PAGESIZE);
	open_first_device();
	ibv_query_gid(ctx, 1, 0, &gid);
	src = malloc(8192);
	memset(src, 0x5a, 8192);
	smr = ibv_reg_mr(pd, src, 8192, IBV_ACCESS_LOCAL_WRITE);
	if (!smr) { printf("FAIL setup: reg src\n"); return 100; }

	pthread_t ch;
	pthread_create(&ch, NULL, churn, NULL);
	double end = now() + 5;
	int rounds = 0, bad_rounds = 0, no_hang = 1;
	long total_posted = 0;
	while (now() < end) {
		cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
		struct ibv_cq *pcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		qp = rc_qp(cq);
		struct ibv_qp *peer = rc_qp(pcq);
		if (!qp || !peer || bring_up(qp, peer->qp_num) || bring_up(peer, qp->qp_num)) {
			printf("FAIL setup: cannot connect a QP pair (%s)\n", strerror(errno));
			return 100;
		}
		posted = completed = 0;
		posters_done = saw_error = 0;
		round_end = now() + 0.5;
		pthread_t t1, t2;
		pthread_create(&t1, NULL, poster, (void *)1);
		pthread_create(&t2, NULL, poster, (void *)2);
		pthread_join(t1, NULL);
		pthread_join(t2, NULL);
		if (hung) {
			no_hang = 0;
			printf("# round %d: %ld posted, %ld completed\n", rounds, (long)posted, (long)completed);
			break;
		}
		if (completed != posted)
			bad_rounds++;
		total_posted += posted;
		rounds++;
		ibv_destroy_qp(qp);
		ibv_destroy_qp(peer);
		ibv_destroy_cq(cq);
		ibv_destroy_cq(pcq);
	}
	stop_churn = 1;
	pthread_join(ch, NULL);
	printf("# %d rounds, %ld WRs: %ld ok, %ld access errors, %ld flushed, %ld other; %ld registrations\n",
	       rounds, total_posted, (long)ok_wc, (long)access_wc, (long)flush_wc, (long)other_wc, (long)churned);
	CHECK("no_hang", no_hang, "a round's completions did not all arrive");
	CHECK("all_accounted", bad_rounds == 0 && ok_wc + access_wc + flush_wc + other_wc == total_posted,
	      "%d rounds with completions missing", bad_rounds);
	CHECK("only_expected_statuses", other_wc == 0, "%ld unexpected statuses", (long)other_wc);
	CHECK("exercised", rounds > 1 && ok_wc > 0 && access_wc > 0 && churned > 10,
	      "%d rounds, %ld ok, %ld access errors, %ld registrations", rounds, (long)ok_wc, (long)access_wc,
	      (long)churned);
	printf("alive\n");
	return failures;
}
