/*
 * Counts and descriptors a program gets wrong, from C (issue 33): a
 * library loaded into someone else's program must answer with an error,
 * never crash, hang or touch what the program owns.
 *
 *  - num_sge beyond the queue's limit (1<<30, max+1, negative) with a
 *    one-entry list that ends just before an unreadable page: EINVAL and
 *    bad_wr at the WR (rxe's answer), before any entry past the limit is
 *    read; on send, receive and SRQ posts, and ENOSPC from the ibv_wr_*
 *    builder's set_sge_list (rxe's). Inline data beyond the QP's
 *    max_inline_data: EINVAL before a byte is copied.
 *  - a WR list that loops (wr.next = &wr) or is longer than the queue:
 *    ENOMEM with bad_wr at the first WR that did not fit, the ones before
 *    it posted (their completions counted, or the queue found full).
 *  - a completion channel's fd or the context's async_fd closed by the
 *    program and its number reused for a file: the file is not written,
 *    ibv_get_cq_event / ibv_get_async_event fail (EBADF) instead of
 *    spinning, and destroying the channel or closing the context leaves
 *    the program's file open.
 *
 * With no argument every case runs; arguments name the cases to run.
 * Prints "ok NAME" or "FAIL NAME: why" per check; a case that hangs is
 * ended by alarm() with a FAIL line. The exit status is the number of
 * failures. Built and run by tests/bounds.rs.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "verbs_test.h"

static const char *running = "setup";
static struct ibv_mr *mr;
static char *buf;
/* One SGE (on buf) in the last bytes of a page whose next page is PROT_NONE. */
static struct ibv_sge *edge;

static void on_alarm(int sig) {
	(void)sig;
	char m[128];
	int n = snprintf(m, sizeof m, "FAIL %s: still running after the alarm\n", running);
	if (write(1, m, n) < 0) {}
	_exit(99);
}

/* Each case gets `secs` seconds. */
static void start(const char *name, unsigned secs) {
	running = name;
	alarm(secs);
}

static struct ibv_qp *make_qp(struct ibv_cq *cq, struct ibv_srq *srq, uint32_t depth) {
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .srq = srq,
		.cap = { .max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	return ibv_create_qp(pd, &a);
}

/* An RC QP on `cq` with queues of `depth`, connected to a peer on a CQ of its own. */
static struct ibv_qp *connected(struct ibv_cq *cq, uint32_t depth) {
	struct ibv_cq *pc = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a = make_qp(cq, NULL, depth), *b = make_qp(pc, NULL, 64);
	if (!a || !b || connect_qp(a, b->qp_num) || connect_qp(b, a->qp_num)) {
		printf("FAIL setup: cannot connect a QP pair (%s)\n", strerror(errno));
		exit(100);
	}
	return a;
}

static int to_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

/* Completions of `cq` within 2 s until `want`, then 100 ms more for
 * extras; each must have `status`; -1 when one did not. */
static int count(struct ibv_cq *cq, int want, int status) {
	struct ibv_wc wc[16];
	int got = 0;
	double end = now() + 2, extra = 0;
	while (now() < end) {
		int n = ibv_poll_cq(cq, 16, wc);
		if (n < 0) return -2;
		for (int i = 0; i < n; i++)
			if ((int)wc[i].status != status) return -1;
		got += n;
		if (got >= want && !extra) {
			extra = now() + 0.1;
			end = extra;
		}
	}
	return got;
}

static void rdma_write(struct ibv_send_wr *w, uint64_t id, struct ibv_sge *s) {
	memset(w, 0, sizeof *w);
	w->wr_id = id;
	w->sg_list = s;
	w->num_sge = 1;
	w->opcode = IBV_WR_RDMA_WRITE;
	w->send_flags = IBV_SEND_SIGNALED;
	w->wr.rdma.remote_addr = (uintptr_t)buf + 2048;
	w->wr.rdma.rkey = mr->rkey;
}

static int wanted(int argc, char **argv, const char *name) {
	if (argc < 2) return 1;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name)) return 1;
	return 0;
}

/* --- num_sge ----------------------------------------------------------- */

static void send_sge(const char *name, int num_sge) {
	start(name, 10);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = connected(cq, 4);
	struct ibv_send_wr w, *bad = NULL;
	rdma_write(&w, 1, edge);
	w.num_sge = num_sge;
	int rc = ibv_post_send(qp, &w, &bad);
	CHECK(name, rc == EINVAL && bad == &w && count(cq, 0, 0) == 0,
	      "rc %d bad %s", rc, bad == &w ? "the WR" : "not the WR");
}

/* Inline data longer than the QP takes (2 GiB from a 4 KiB buffer):
 * EINVAL before a byte is copied. */
static void send_inline_over(void) {
	start("send_inline_over", 10);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = connected(cq, 4);
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 1u << 31, .lkey = mr->lkey };
	struct ibv_send_wr w, *bad = NULL;
	rdma_write(&w, 7, &s);
	w.send_flags |= IBV_SEND_INLINE;
	int rc = ibv_post_send(qp, &w, &bad);
	CHECK("send_inline_over", rc == EINVAL && bad == &w && count(cq, 0, 0) == 0,
	      "rc %d bad %s", rc, bad == &w ? "the WR" : "not the WR");
}

/* Inline data from a page the program unmapped: EFAULT from the post
 * (and from the builder's ibv_wr_complete), not a signal. */
static void inline_unmapped(void) {
	start("inline_unmapped", 10);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *pc = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr_ex a = { .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC, .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd, .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE };
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a), *b = make_qp(pc, NULL, 4);
	if (!qp || !b || connect_qp(qp, b->qp_num) || connect_qp(b, qp->qp_num)) {
		printf("FAIL setup: inline QP (%s)\n", strerror(errno));
		exit(100);
	}
	char *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, 4096);
	struct ibv_sge s = { .addr = (uintptr_t)gone, .length = 16, .lkey = 0 };
	struct ibv_send_wr w, *bad = NULL;
	rdma_write(&w, 7, &s);
	w.send_flags |= IBV_SEND_INLINE;
	int rc = ibv_post_send(qp, &w, &bad);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	ibv_wr_start(x);
	x->wr_id = 8;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_rdma_write(x, mr->rkey, (uintptr_t)buf + 2048);
	ibv_wr_set_inline_data(x, gone, 16);
	int rb = ibv_wr_complete(x);
	CHECK("inline_unmapped", rc == EFAULT && bad == &w && rb == EFAULT && count(cq, 0, 0) == 0,
	      "post %d bad %s, builder %d", rc, bad == &w ? "the WR" : "not the WR", rb);
}

static void recv_sge(const char *name, int num_sge) {
	start(name, 10);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = connected(cq, 4);
	struct ibv_recv_wr r = { .wr_id = 2, .sg_list = edge, .num_sge = num_sge }, *bad = NULL;
	int rc = ibv_post_recv(qp, &r, &bad);
	CHECK(name, rc == EINVAL && bad == &r, "rc %d bad %s", rc, bad == &r ? "the WR" : "not the WR");
}

static struct ibv_srq *make_srq(uint32_t depth) {
	struct ibv_srq_init_attr a = { .attr = { .max_wr = depth, .max_sge = 1 } };
	struct ibv_srq *s = ibv_create_srq(pd, &a);
	if (!s) {
		printf("FAIL setup: create_srq: %s\n", strerror(errno));
		exit(100);
	}
	return s;
}

static void srq_sge(const char *name, int num_sge) {
	start(name, 10);
	struct ibv_srq *srq = make_srq(4);
	struct ibv_recv_wr r = { .wr_id = 3, .sg_list = edge, .num_sge = num_sge }, *bad = NULL;
	int rc = ibv_post_srq_recv(srq, &r, &bad);
	CHECK(name, rc == EINVAL && bad == &r, "rc %d bad %s", rc, bad == &r ? "the WR" : "not the WR");
}

/* num_sge > 0: ibv_wr_set_sge_list of that many; 0: 2 GiB of inline data. */
static void builder_sge(const char *name, size_t num_sge) {
	start(name, 10);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *pc = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr_ex a = { .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC, .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd, .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE };
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a), *b = make_qp(pc, NULL, 4);
	if (!qp || !b || connect_qp(qp, b->qp_num) || connect_qp(b, qp->qp_num)) {
		printf("FAIL setup: builder QP (%s)\n", strerror(errno));
		exit(100);
	}
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	ibv_wr_start(x);
	x->wr_id = 4;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mr->rkey, (uintptr_t)buf + 2048);
	if (num_sge == (size_t)-1) {
		/* A million WRs built and never completed: the builder holds
		 * no more than the queue (4), so memory stays bounded. */
		struct ibv_sge one = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
		ibv_wr_set_sge_list(x, 1, &one);
		for (int i = 0; i < 1000000; i++) {
			ibv_wr_rdma_write(x, mr->rkey, (uintptr_t)buf + 2048);
			ibv_wr_set_sge_list(x, 1, &one);
		}
	} else if (num_sge)
		ibv_wr_set_sge_list(x, num_sge, edge);
	else
		ibv_wr_set_inline_data(x, buf, (size_t)1 << 31);
	int rc = ibv_wr_complete(x);
	CHECK(name, rc == ENOSPC && count(cq, 0, 0) == 0, "rc %d", rc);
}

/* --- WR lists ---------------------------------------------------------- */

static void send_loop(void) {
	start("send_loop", 10);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = connected(cq, 4);
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr w, *bad = NULL;
	rdma_write(&w, 5, &s);
	w.next = &w;
	int rc = ibv_post_send(qp, &w, &bad);
	int n = count(cq, 4, IBV_WC_SUCCESS);
	CHECK("send_loop", rc == ENOMEM && bad == &w && n == 4, "rc %d bad %s, %d completions",
	      rc, bad == &w ? "the WR" : "not the WR", n);
}

static void send_list_long(void) {
	start("send_list_long", 10);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = connected(cq, 4);
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr w[5], *bad = NULL;
	for (int i = 0; i < 5; i++) {
		rdma_write(&w[i], 10 + i, &s);
		w[i].next = i < 4 ? &w[i + 1] : NULL;
	}
	int rc = ibv_post_send(qp, w, &bad);
	int n = count(cq, 4, IBV_WC_SUCCESS);
	CHECK("send_list_long", rc == ENOMEM && bad == &w[4] && n == 4, "rc %d bad %d, %d completions",
	      rc, bad ? (int)(bad - w) : -1, n);
}

/* A loop of receives on a QP, then the QP to ERR: the ones posted flush. */
static void recv_loop(const char *name, int err_first) {
	start(name, 10);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = connected(cq, 4);
	if (err_first && to_error(qp)) {
		printf("FAIL setup: QP to ERR\n");
		exit(100);
	}
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr r = { .wr_id = 6, .sg_list = &s, .num_sge = 1 }, *bad = NULL;
	r.next = &r;
	int rc = ibv_post_recv(qp, &r, &bad);
	if (!err_first)
		to_error(qp);
	int n = count(cq, 4, IBV_WC_WR_FLUSH_ERR);
	CHECK(name, rc == ENOMEM && bad == &r && n == 4, "rc %d bad %s, %d flushed",
	      rc, bad == &r ? "the WR" : "not the WR", n);
}

static void recv_list_long(void) {
	start("recv_list_long", 10);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = connected(cq, 4);
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr r[5], *bad = NULL;
	for (int i = 0; i < 5; i++)
		r[i] = (struct ibv_recv_wr){ .wr_id = 20 + i, .sg_list = &s, .num_sge = 1,
					     .next = i < 4 ? &r[i + 1] : NULL };
	int rc = ibv_post_recv(qp, r, &bad);
	to_error(qp);
	int n = count(cq, 4, IBV_WC_WR_FLUSH_ERR);
	CHECK("recv_list_long", rc == ENOMEM && bad == &r[4] && n == 4, "rc %d bad %d, %d flushed",
	      rc, bad ? (int)(bad - r) : -1, n);
}

/* A loop (or 5 WRs) on an SRQ of 4: ENOMEM at the fifth; then the SRQ is
 * full (one more WR is refused), so the four were posted. */
static void srq_list(const char *name, int loop) {
	start(name, 10);
	struct ibv_srq *srq = make_srq(4);
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr r[5], *bad = NULL, *want;
	for (int i = 0; i < 5; i++)
		r[i] = (struct ibv_recv_wr){ .wr_id = 30 + i, .sg_list = &s, .num_sge = 1,
					     .next = i < 4 ? &r[i + 1] : NULL };
	if (loop)
		r[0].next = &r[0];
	want = loop ? &r[0] : &r[4];
	int rc = ibv_post_srq_recv(srq, r, &bad);
	struct ibv_recv_wr one = { .wr_id = 40, .sg_list = &s, .num_sge = 1 }, *bad1 = NULL;
	int full = ibv_post_srq_recv(srq, &one, &bad1);
	CHECK(name, rc == ENOMEM && bad == want && full == ENOMEM && bad1 == &one,
	      "rc %d bad %s, then %d", rc, bad == want ? "right" : "wrong", full);
}

/* --- descriptors ------------------------------------------------------- */

static const char content[] = "the program's own file\n";
static char path[64];

/* Opens a file of the program's at number `n` (just closed by it). */
static int file_at(int n) {
	int f = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (f < 0 || write(f, content, sizeof content - 1) != (ssize_t)(sizeof content - 1)) {
		printf("FAIL setup: %s: %s\n", path, strerror(errno));
		exit(100);
	}
	if (f != n) {
		if (dup2(f, n) != n) {
			printf("FAIL setup: dup2: %s\n", strerror(errno));
			exit(100);
		}
		close(f);
	}
	return n;
}

/* Whether number `n` is still open on the file with its contents. */
static int intact(int n) {
	char b[128] = { 0 };
	struct stat st;
	if (fcntl(n, F_GETFD) < 0 || fstat(n, &st) || !S_ISREG(st.st_mode))
		return 0;
	ssize_t k = pread(n, b, sizeof b, 0);
	return k == (ssize_t)(sizeof content - 1) && !memcmp(b, content, k);
}

static void channel_cases(int argc, char **argv) {
	int want_any = wanted(argc, argv, "chan_event_file_intact") ||
		wanted(argc, argv, "chan_get_event_reused") || wanted(argc, argv, "chan_destroy_reused");
	if (want_any) {
		start("chan_event_file_intact", 10);
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, ch, 0);
		struct ibv_qp *qp = connected(cq, 4);
		struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr w, *bad;
		rdma_write(&w, 50, &s);
		ibv_req_notify_cq(cq, 0);
		int n = ch->fd;
		close(n);
		file_at(n);
		int rc = ibv_post_send(qp, &w, &bad);
		struct ibv_wc wc;
		int st = one(cq, &wc);
		usleep(100000);
		CHECK("chan_event_file_intact", rc == 0 && st == IBV_WC_SUCCESS && intact(n),
		      "post %d status %d, the file %s", rc, st, intact(n) ? "intact" : "changed or closed");

		start("chan_get_event_reused", 5);
		struct ibv_cq *ecq = NULL;
		void *ectx = NULL;
		errno = 0;
		rc = ibv_get_cq_event(ch, &ecq, &ectx);
		int e = errno;
		CHECK("chan_get_event_reused", rc == -1 && (e == EBADF || e == EINVAL) && intact(n),
		      "rc %d errno %d, the file %s", rc, e, intact(n) ? "intact" : "changed or closed");

		start("chan_destroy_reused", 10);
		ibv_destroy_qp(qp);
		int d = ibv_destroy_cq(cq);
		int dc = ibv_destroy_comp_channel(ch);
		CHECK("chan_destroy_reused", d == 0 && dc == 0 && intact(n), "destroy cq %d channel %d, the file %s",
		      d, dc, intact(n) ? "intact" : "changed or closed");
		close(n);
	}
	if (wanted(argc, argv, "chan_get_event_closed")) {
		start("chan_get_event_closed", 5);
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, ch, 0);
		ibv_req_notify_cq(cq, 0);
		close(ch->fd);
		struct ibv_cq *ecq = NULL;
		void *ectx = NULL;
		errno = 0;
		int rc = ibv_get_cq_event(ch, &ecq, &ectx);
		int e = errno;
		CHECK("chan_get_event_closed", rc == -1 && (e == EBADF || e == EINVAL), "rc %d errno %d", rc, e);
		ibv_destroy_cq(cq);
		ibv_destroy_comp_channel(ch);
	}
}

/* On a second context: its async_fd closed and reused, an async event
 * (a QP's remote access error: QP_FATAL), then ibv_close_device. */
static void async_cases(int argc, char **argv) {
	if (!wanted(argc, argv, "async_event_file_intact") && !wanted(argc, argv, "async_get_event_reused") &&
	    !wanted(argc, argv, "close_device_reused"))
		return;
	start("async_event_file_intact", 10);
	struct ibv_context *ctx1 = ctx;
	struct ibv_pd *pd1 = pd;
	struct ibv_mr *mr1 = mr;
	union ibv_gid gid1 = gid;
	open_first_device();
	ibv_query_gid(ctx, 1, 0, &gid);
	mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = connected(cq, 4);
	int n = ctx->async_fd;
	close(n);
	file_at(n);
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr w, *bad;
	rdma_write(&w, 60, &s);
	w.wr.rdma.rkey = mr->rkey ^ 0x5a5a00;
	int rc = ibv_post_send(qp, &w, &bad);
	struct ibv_wc wc;
	int st = one(cq, &wc);
	usleep(200000);
	CHECK("async_event_file_intact", rc == 0 && st == IBV_WC_REM_ACCESS_ERR && intact(n),
	      "post %d status %d, the file %s", rc, st, intact(n) ? "intact" : "changed or closed");

	start("async_get_event_reused", 5);
	struct ibv_async_event ev;
	errno = 0;
	rc = ibv_get_async_event(ctx, &ev);
	int e = errno;
	CHECK("async_get_event_reused", rc == -1 && (e == EBADF || e == EINVAL) && intact(n),
	      "rc %d errno %d, the file %s", rc, e, intact(n) ? "intact" : "changed or closed");

	start("close_device_reused", 10);
	struct ibv_context *ctx2 = ctx;
	ctx = ctx1;
	pd = pd1;
	mr = mr1;
	gid = gid1;
	rc = ibv_close_device(ctx2);
	CHECK("close_device_reused", rc == 0 && intact(n), "close %d, the file %s", rc,
	      intact(n) ? "intact" : "changed or closed");
	close(n);
}

int main(int argc, char **argv) {
	signal(SIGALRM, on_alarm);
	alarm(30);
	page = sysconf(_SC_PAGESIZE);
	snprintf(path, sizeof path, "/tmp/roce-bounds-%d", (int)getpid());
	open_first_device();
	ibv_query_gid(ctx, 1, 0, &gid);
	buf = aligned_alloc(4096, 4096);
	memset(buf, 0, 4096);
	mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!mr || two == MAP_FAILED || mprotect(two + page, page, PROT_NONE)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 100;
	}
	edge = (struct ibv_sge *)(two + page) - 1;
	*edge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };

	struct { const char *name; void (*f)(const char *, int); int n; } sge[] = {
		{ "send_sge_huge", send_sge, 1 << 30 },
		{ "send_sge_over", send_sge, 2 },
		{ "send_sge_negative", send_sge, -1 },
		{ "recv_sge_huge", recv_sge, 1 << 30 },
		{ "recv_sge_over", recv_sge, 2 },
		{ "recv_sge_negative", recv_sge, -1 },
		{ "srq_sge_huge", srq_sge, 1 << 30 },
		{ "srq_sge_over", srq_sge, 2 },
		{ "srq_sge_negative", srq_sge, -1 },
	};
	for (size_t i = 0; i < sizeof sge / sizeof sge[0]; i++)
		if (wanted(argc, argv, sge[i].name))
			sge[i].f(sge[i].name, sge[i].n);
	if (wanted(argc, argv, "send_inline_over"))
		send_inline_over();
	if (wanted(argc, argv, "builder_sge_huge"))
		builder_sge("builder_sge_huge", (size_t)1 << 40);
	if (wanted(argc, argv, "builder_sge_over"))
		builder_sge("builder_sge_over", 2);
	if (wanted(argc, argv, "builder_inline_over"))
		builder_sge("builder_inline_over", 0);
	if (wanted(argc, argv, "inline_unmapped"))
		inline_unmapped();
	if (wanted(argc, argv, "builder_many"))
		builder_sge("builder_many", (size_t)-1);

	if (wanted(argc, argv, "send_loop"))
		send_loop();
	if (wanted(argc, argv, "send_list_long"))
		send_list_long();
	if (wanted(argc, argv, "recv_loop"))
		recv_loop("recv_loop", 0);
	if (wanted(argc, argv, "recv_loop_err"))
		recv_loop("recv_loop_err", 1);
	if (wanted(argc, argv, "recv_list_long"))
		recv_list_long();
	if (wanted(argc, argv, "srq_loop"))
		srq_list("srq_loop", 1);
	if (wanted(argc, argv, "srq_list_long"))
		srq_list("srq_list_long", 0);

	channel_cases(argc, argv);
	async_cases(argc, argv);
	alarm(0);
	unlink(path);
	return failures;
}
