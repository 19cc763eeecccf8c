/*
 * Answers rdma-core, the kernel and rxe give, from C: the calls below
 * once got another answer from the drop-in library (issue 33). Each
 * check names the call and what rdma-core (or the kernel behind it)
 * answers.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; the exit status is the
 * number of failures. Built and run by tests/answers.rs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/stat.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "verbs_test.h"

static struct ibv_device_attr dev;

/* Two connected RC QPs, each on a CQ of its own. */
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

static int post_one(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t addr, uint32_t len, uint32_t lkey,
		    uint64_t raddr, uint32_t rkey) {
	struct ibv_sge s = { .addr = addr, .length = len, .lkey = lkey };
	struct ibv_send_wr w = { .wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	w.wr.rdma.remote_addr = raddr;
	w.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &w, &bad);
}

/* A new RC QP taken to INIT. */
static struct ibv_qp *init_qp(struct ibv_cq *cq) {
	struct ibv_qp *qp = rc_qp(cq);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		printf("FAIL setup: INIT QP (%s)\n", strerror(errno));
		exit(100);
	}
	return qp;
}

/* The INIT -> RTR attributes of connect_qp, towards QPN `dest`. */
static int to_rtr(struct ibv_qp *qp, uint32_t dest, uint8_t port, uint8_t rd_atomic) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
		.rq_psn = 1, .max_dest_rd_atomic = rd_atomic, .min_rnr_timer = 12 };
	a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = port;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp, uint8_t rd_atomic) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 1, .rnr_retry = 1,
		.sq_psn = 1, .max_rd_atomic = rd_atomic };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void case_a(void) {
	/* a. comp_vector must be below num_comp_vectors (kernel: EINVAL). */
	errno = 0;
	struct ibv_cq *bad_cq = ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors);
	int e1 = errno;
	struct ibv_cq_init_attr_ex cx = { .cqe = 4, .comp_vector = ctx->num_comp_vectors };
	errno = 0;
	struct ibv_cq_ex *bad_cqx = ibv_create_cq_ex(ctx, &cx);
	int e2 = errno;
	struct ibv_cq *good_cq = ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors - 1);
	CHECK("cq_comp_vector", !bad_cq && e1 == EINVAL && !bad_cqx && e2 == EINVAL && good_cq,
	      "create_cq %p errno %d, create_cq_ex %p errno %d, last vector %p", (void *)bad_cq, e1,
	      (void *)bad_cqx, e2, (void *)good_cq);
}

static void case_b(void) {
	/* b. One port: an address vector on port 2 (or 0) is EINVAL, as is
	 * IBV_QP_PORT 2. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *q = init_qp(cq);
	int r2 = to_rtr(q, q->qp_num, 2, 1);
	int r0 = to_rtr(q, q->qp_num, 0, 1);
	struct ibv_qp *r = rc_qp(cq);
	struct ibv_qp_attr pa = { .qp_state = IBV_QPS_INIT, .port_num = 2 };
	int rp = ibv_modify_qp(r, &pa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	CHECK("av_port_2", r2 == EINVAL && r0 == EINVAL && rp == EINVAL && q->state == IBV_QPS_INIT,
	      "AV port 2: %d, AV port 0: %d, IBV_QP_PORT 2: %d, state %d", r2, r0, rp, q->state);
}

static void case_c(void) {
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *q = init_qp(cq);
	/* c. Read/atomic depths above what ibv_query_device reports: EINVAL
	 * (rxe_qp_chk_attr); at the limits they are taken. */
	int rd = to_rtr(q, q->qp_num, 1, dev.max_qp_rd_atom + 1);
	int rd_ok = to_rtr(q, q->qp_num, 1, dev.max_qp_rd_atom);
	int init = to_rts(q, dev.max_qp_init_rd_atom + 1);
	int init_ok = to_rts(q, dev.max_qp_init_rd_atom);
	CHECK("rd_atomic_limits", rd == EINVAL && rd_ok == 0 && init == EINVAL && init_ok == 0,
	      "max_dest_rd_atomic %d: %d, %d: %d; max_rd_atomic %d: %d, %d: %d", dev.max_qp_rd_atom + 1, rd,
	      dev.max_qp_rd_atom, rd_ok, dev.max_qp_init_rd_atom + 1, init, dev.max_qp_init_rd_atom, init_ok);
}

static void case_d(void) {
	/* d. NULL address with a length: EFAULT (the kernel cannot pin page 0). */
	errno = 0;
	struct ibv_mr *null_mr = ibv_reg_mr(pd, NULL, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK("reg_mr_null", !null_mr && errno == EFAULT, "mr %p errno %d", (void *)null_mr, errno);
}

static void case_e(void) {
	/* e. ibv_query_gid_table returns a negative errno; ibv_query_gid_ex a
	 * positive one (EINVAL for a bad port, ENODATA for an empty index). */
	struct ibv_gid_entry ents[64], one_ent;
	ssize_t all = ibv_query_gid_table(ctx, ents, 64, 0);
	errno = 0;
	ssize_t none = ibv_query_gid_table(ctx, ents, 0, 0);
	int none_errno = errno;
	ssize_t few = all > 1 ? ibv_query_gid_table(ctx, ents, all - 1, 0) : -EINVAL;
	int bad_port = ibv_query_gid_ex(ctx, 2, 0, &one_ent, 0);
	int bad_index = ibv_query_gid_ex(ctx, 1, 1000, &one_ent, 0);
	CHECK("gid_table_errno", all >= 1 && none == -EINVAL && none_errno == EINVAL && few == -EINVAL &&
	      bad_port == EINVAL && bad_index == ENODATA,
	      "table %zd, max 0: %zd (errno %d), max %zd: %zd, port 2: %d, index 1000: %d",
	      all, none, none_errno, all - 1, few, bad_port, bad_index);
}

static void case_f(void) {
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	/* f. IBV_QP_INIT_ATTR_CREATE_FLAGS with no flag is an ordinary QP. */
	struct ibv_qp_init_attr_ex qx = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS, .create_flags = 0 };
	errno = 0;
	struct ibv_qp *fq = ibv_create_qp_ex(ctx, &qx);
	int fe = errno;
	qx.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	struct ibv_qp *fq2 = ibv_create_qp_ex(ctx, &qx);
	CHECK("create_flags_zero", fq && !fq2 && errno == EOPNOTSUPP, "no flag: %p (errno %d), a flag: %p errno %d",
	      (void *)fq, fe, (void *)fq2, errno);
}

static void case_g(void) {
	/* g. A receive into a region moved to another PD is posted; the SEND
	 * that meets it fails: local protection error at the receiver,
	 * remote operational error at the sender. */
	struct ibv_cq *ga, *gb;
	struct ibv_qp *sa, *sb;
	pair(&ga, &sa, &gb, &sb);
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	char *rbuf = calloc(1, 4096), *sbuf = calloc(1, 4096);
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	int rr = ibv_rereg_mr(rmr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0);
	struct ibv_sge rs = { .addr = (uintptr_t)rbuf, .length = 64, .lkey = rmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 5, .sg_list = &rs, .num_sge = 1 }, *rbad = NULL;
	int pr = ibv_post_recv(sb, &rw, &rbad);
	int ps = post_one(sa, IBV_WR_SEND, (uintptr_t)sbuf, 64, smr->lkey, 0, 0);
	struct ibv_wc wa = { 0 }, wb = { 0 };
	int st_a = ps == 0 ? one(ga, &wa) : -1;
	int st_b = pr == 0 ? one(gb, &wb) : -1;
	CHECK("recv_other_pd", rr == 0 && pr == 0 && ps == 0 && st_a == IBV_WC_REM_OP_ERR &&
	      st_b == IBV_WC_LOC_PROT_ERR, "rereg %d, post_recv %d, post_send %d, sender %s, receiver %s",
	      rr, pr, ps, st_a < 0 ? "none" : ibv_wc_status_str(st_a), st_b < 0 ? "none" : ibv_wc_status_str(st_b));
}

static void case_h(void) {
	/* h. rdma_set_option's lengths, as the kernel's ucma checks them. */
	struct rdma_event_channel *ech = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	if (!ech || rdma_create_id(ech, &id, NULL, RDMA_PS_TCP)) {
		printf("FAIL setup: rdma_create_id (%s)\n", strerror(errno));
		exit(100);
	}
	int tos4 = 0x20, yes = 1;
	uint8_t tos1 = 0x20;
	errno = 0;
	int o1 = rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos4, sizeof(tos4));
	int o1e = errno;
	int o2 = rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos1, sizeof(tos1));
	errno = 0;
	int o3 = rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &tos1, sizeof(tos1));
	int o3e = errno;
	int o4 = rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &yes, sizeof(yes));
	errno = 0;
	int o5 = rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &yes, sizeof(yes));
	int o5e = errno;
	errno = 0;
	int o6 = rdma_set_option(id, RDMA_OPTION_ID, 77, &yes, sizeof(yes));
	int o6e = errno;
	CHECK("set_option_len", o1 == -1 && o1e == EINVAL && o2 == 0 && o3 == -1 && o3e == EINVAL && o4 == 0 &&
	      o5 == -1 && o5e == EINVAL && o6 == -1 && o6e == ENOSYS,
	      "TOS len 4: %d/%d, len 1: %d; REUSEADDR len 1: %d/%d, len 4: %d; ACK_TIMEOUT len 4: %d/%d; option 77: %d/%d",
	      o1, o1e, o2, o3, o3e, o4, o5, o5e, o6, o6e);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ech);
}

static void case_i(void) {
	/* i. cmd_fd is a descriptor of the library's (close-on-exec) that a
	 * program can dup; importing from it is EOPNOTSUPP; closing the
	 * context closes it. */
	char *sbuf = calloc(1, 4096);
	struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	int fd = ctx->cmd_fd;
	int flags = fd >= 0 ? fcntl(fd, F_GETFD) : -1;
	int copy = fd >= 0 ? dup(fd) : -1;
	errno = 0;
	struct ibv_context *imp = copy >= 0 ? ibv_import_device(copy) : NULL;
	int ie = errno;
	errno = 0;
	struct ibv_pd *ipd = ibv_import_pd(ctx, pd->handle);
	int ipe = errno;
	errno = 0;
	struct ibv_mr *imr = ibv_import_mr(pd, smr->handle);
	int ime = errno;
	ibv_unimport_pd(pd);
	ibv_unimport_mr(smr);
	if (copy >= 0)
		close(copy);
	CHECK("cmd_fd", fd >= 0 && flags >= 0 && (flags & FD_CLOEXEC) && copy >= 0 && !imp && ie == EOPNOTSUPP &&
	      !ipd && ipe == EOPNOTSUPP && !imr && ime == EOPNOTSUPP,
	      "cmd_fd %d (flags %d), dup %d, import_device %p/%d, import_pd %p/%d, import_mr %p/%d", fd, flags,
	      copy, (void *)imp, ie, (void *)ipd, ipe, (void *)imr, ime);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *c2 = list && n > 0 ? ibv_open_device(list[0]) : NULL;
	ibv_free_device_list(list);
	int fd2 = c2 ? c2->cmd_fd : -1;
	int closed = c2 && fd2 >= 0 && ibv_close_device(c2) == 0 && fcntl(fd2, F_GETFD) == -1 && errno == EBADF;
	CHECK("cmd_fd_closed", closed, "second context %p cmd_fd %d still open after ibv_close_device", (void *)c2,
	      fd2);
}

static void case_j(void) {
	/* j. No ODP capability reported, so IBV_ACCESS_ON_DEMAND is refused
	 * as the kernel refuses it on such a device (EOPNOTSUPP). */
	char *sbuf = calloc(1, 4096);
	struct ibv_device_attr_ex dx;
	int qd = ibv_query_device_ex(ctx, NULL, &dx);
	errno = 0;
	struct ibv_mr *odp = ibv_reg_mr(pd, sbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	CHECK("odp", qd == 0 && !(dx.odp_caps.general_caps & IBV_ODP_SUPPORT) && !odp && errno == EOPNOTSUPP,
	      "query %d, general_caps %#llx, ON_DEMAND region %p errno %d", qd,
	      (unsigned long long)dx.odp_caps.general_caps, (void *)odp, errno);
}

static void case_k(void) {
	/* k. A local buffer outside its region, or an unknown lkey: the post
	 * succeeds and the completion says local protection error. */
	char *small = calloc(1, 4096), *big = calloc(1, 4096);
	struct ibv_mr *small_mr = ibv_reg_mr(pd, small, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *big_mr = ibv_reg_mr(pd, big, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_cq *ka, *kb;
	struct ibv_qp *xa, *xb;
	struct ibv_wc w = { 0 };
	pair(&ka, &xa, &kb, &xb);
	int k1 = post_one(xa, IBV_WR_RDMA_READ, (uintptr_t)small, 128, small_mr->lkey, (uintptr_t)big, big_mr->rkey);
	int s1 = k1 == 0 ? one(ka, &w) : -1;
	pair(&ka, &xa, &kb, &xb);
	int k2 = post_one(xa, IBV_WR_SEND, (uintptr_t)small, 128, small_mr->lkey, 0, 0);
	int s2 = k2 == 0 ? one(ka, &w) : -1;
	pair(&ka, &xa, &kb, &xb);
	int k3 = post_one(xa, IBV_WR_RDMA_WRITE, (uintptr_t)small, 8, 0xdead00, (uintptr_t)big, big_mr->rkey);
	int s3 = k3 == 0 ? one(ka, &w) : -1;
	CHECK("sge_outside_region", k1 == 0 && s1 == IBV_WC_LOC_PROT_ERR && k2 == 0 && s2 == IBV_WC_LOC_PROT_ERR &&
	      k3 == 0 && s3 == IBV_WC_LOC_PROT_ERR,
	      "READ into 64 of 128: post %d status %d; SEND of 128 from 64: post %d status %d; unknown lkey: post %d status %d",
	      k1, s1, k2, s2, k3, s3);
}

static void case_cm_fd(void) {
	/* An rdma_cm event channel whose fd the program closed and reused
	 * for a file: the library never writes, reads or closes that file
	 * (it counts events through a descriptor of its own), and
	 * rdma_get_cm_event with nothing queued says EBADF instead of
	 * waiting on the file. */
	struct rdma_event_channel *ech = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	if (!ech || rdma_create_id(ech, &id, NULL, RDMA_PS_TCP)) {
		printf("FAIL setup: rdma_create_id (%s)\n", strerror(errno));
		exit(100);
	}
	int fd = ech->fd;
	close(fd);
	char path[] = "/tmp/roce-answers-XXXXXX";
	int f = mkstemp(path);
	if (f != fd) {
		dup2(f, fd);
		close(f);
	}
	unlink(path);
	int w = write(fd, "hello", 5);
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int r = rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 1000);
	struct rdma_cm_event *ev = NULL;
	alarm(10);
	int g1 = rdma_get_cm_event(ech, &ev);
	if (!g1)
		rdma_ack_cm_event(ev);
	errno = 0;
	int g2 = rdma_get_cm_event(ech, &ev);
	int e2 = errno;
	alarm(0);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ech);
	struct stat st = { 0 };
	int open_after = fcntl(fd, F_GETFD) >= 0 && fstat(fd, &st) == 0;
	CHECK("cm_channel_fd_reused", w == 5 && r == 0 && g1 == 0 && g2 == -1 && e2 == EBADF &&
	      open_after && st.st_size == 5,
	      "write %d resolve %d first %d second %d errno %d, file %s size %ld", w, r, g1, g2, e2,
	      open_after ? "open" : "closed", (long)st.st_size);
	close(fd);
}

static struct rdma_cm_id *bound(struct rdma_event_channel *ech, const char *ip, int port, int reuse, int *rc) {
	struct rdma_cm_id *id = NULL;
	if (rdma_create_id(ech, &id, NULL, RDMA_PS_TCP)) {
		printf("FAIL setup: rdma_create_id (%s)\n", strerror(errno));
		exit(100);
	}
	if (reuse)
		rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &reuse, sizeof(reuse));
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (ip)
		inet_pton(AF_INET, ip, &sin.sin_addr);
	else /* this process's address: its context's GID 0 (::ffff:a.b.c.d) */
		memcpy(&sin.sin_addr, &gid.raw[12], 4);
	errno = 0;
	*rc = rdma_bind_addr(id, (struct sockaddr *)&sin) ? errno : 0;
	return id;
}

static void case_ports(void) {
	/* rdma_cm's port space, as the kernel's cma.c keeps it. */
	struct rdma_event_channel *ech = rdma_create_event_channel();
	int port = 20000 + getpid() % 20000, r1, r2, r3, r4;
	struct rdma_cm_id *a = bound(ech, NULL, port, 0, &r1);
	struct rdma_cm_id *b = bound(ech, NULL, port, 0, &r2);
	struct rdma_cm_id *w = bound(ech, "0.0.0.0", port, 0, &r3);
	struct rdma_cm_id *o = bound(ech, NULL, port + 1, 0, &r4);
	CHECK("cm_bind_same_port", r1 == 0 && r2 == EADDRINUSE && r3 == EADDRNOTAVAIL && r4 == 0,
	      "first %d, same address %d, wildcard %d, another port %d", r1, r2, r3, r4);
	rdma_destroy_id(a);
	rdma_destroy_id(b);
	rdma_destroy_id(w);
	rdma_destroy_id(o);
	struct rdma_cm_id *again = bound(ech, NULL, port, 0, &r1);
	CHECK("cm_port_free_after_destroy", r1 == 0, "bind %d", r1);
	rdma_destroy_id(again);

	struct rdma_cm_id *x = bound(ech, NULL, port, 1, &r1);
	struct rdma_cm_id *y = bound(ech, NULL, port, 1, &r2);
	errno = 0;
	int l1 = rdma_listen(x, 4) ? errno : 0;
	rdma_destroy_id(y);
	errno = 0;
	int l2 = rdma_listen(x, 4) ? errno : 0;
	struct rdma_cm_id *z = bound(ech, NULL, port, 1, &r3);
	CHECK("cm_reuseaddr_until_listen", r1 == 0 && r2 == 0 && l1 == EADDRINUSE && l2 == 0 && r3 == EADDRINUSE,
	      "binds %d %d, listen beside another %d, alone %d, bind beside the listener %d", r1, r2, l1, l2, r3);
	rdma_destroy_id(x);
	rdma_destroy_id(z);

	struct rdma_cm_id *e1 = bound(ech, NULL, 0, 0, &r1);
	struct rdma_cm_id *e2 = bound(ech, NULL, 0, 0, &r2);
	int p1 = ntohs(rdma_get_src_port(e1)), p2 = ntohs(rdma_get_src_port(e2));
	CHECK("cm_ephemeral_ports", r1 == 0 && r2 == 0 && p1 != p2 && p1 >= 32768 && p2 >= 32768,
	      "binds %d %d, ports %d %d", r1, r2, p1, p2);
	rdma_destroy_id(e1);
	rdma_destroy_id(e2);
	rdma_destroy_event_channel(ech);
}

int main(void) {
	open_first_device();
	ibv_query_gid(ctx, 1, 0, &gid);
	if (ibv_query_device(ctx, &dev)) {
		printf("FAIL setup: ibv_query_device\n");
		return 100;
	}

	case_a();
	case_b();
	case_c();
	case_d();
	case_e();
	case_f();
	case_g();
	case_h();
	case_i();
	case_j();
	case_k();
	case_cm_fd();
	case_ports();
	return failures;
}
