/*
 * UD receives over RoCE v2 report their network header type in `sl` —
 * 2 for IPv4, 1 for IPv6, the RoCE L3 header type RoCE NICs put there
 * and UCX's UD transport reads (`sl & 7`) — through ibv_poll_cq's
 * wc.sl and through the extended CQ's ibv_wc_read_sl; the GRH area
 * holds the IP header where the kernel puts it (IPv4: 20 zero bytes,
 * then the IPv4 header; IPv6: the whole 40 bytes). GID 0 (IPv4) and,
 * when the table has it, GID 1 (IPv6, ::1 on loopback). And the
 * ibv_wr_* builder on a UD QP: each WR goes where its
 * ibv_wr_set_ud_addr says, and a WR without one makes ibv_wr_complete
 * answer EINVAL after posting those before it.
 */
#include "verbs_test.h"

#define LEN 64
#define SLOT 256

static struct ibv_cq *scq, *rcq;
static struct ibv_cq_ex *rcqx;
static struct ibv_qp *qa, *qb;
static struct ibv_mr *mr;
static char *buf;

/* Brings a new UD QP to RTS (Q_Key 0x11111111), or exits. */
static struct ibv_qp *ready(struct ibv_qp *qp) {
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
	if (!qp || ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		goto fail;
	m.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &m, IBV_QP_STATE))
		goto fail;
	m.qp_state = IBV_QPS_RTS; m.sq_psn = 1;
	if (ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN))
		goto fail;
	return qp;
fail:
	printf("FAIL setup: UD QP: %s\n", strerror(errno));
	exit(100);
}

static struct ibv_qp *ud_qp(struct ibv_cq *recv) {
	struct ibv_qp_init_attr a = { .send_cq = scq, .recv_cq = recv,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD, .sq_sig_all = 1 };
	return ready(ibv_create_qp(pd, &a));
}

/* Posts a receive of slot `slot` on `qp`. */
static int recv_into(struct ibv_qp *qp, int slot) {
	struct ibv_sge s = { .addr = (uintptr_t)(buf + slot * SLOT), .length = 40 + LEN, .lkey = mr->lkey };
	struct ibv_recv_wr w = { .wr_id = slot, .sg_list = &s, .num_sge = 1 }, *bad;
	memset(buf + slot * SLOT, 0xee, SLOT);
	return ibv_post_recv(qp, &w, &bad);
}

/* Sends LEN bytes from `from` to `to` through an AH to GID `idx`. */
static int send_to(struct ibv_qp *from, struct ibv_qp *to, int idx, union ibv_gid *dgid) {
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
		.grh = { .dgid = *dgid, .sgid_index = idx, .hop_limit = 64 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	struct ibv_sge s = { .addr = (uintptr_t)(buf + 15 * SLOT), .length = LEN, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = 99, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
	struct ibv_wc wc;
	if (!ah)
		return -1;
	w.wr.ud.ah = ah; w.wr.ud.remote_qpn = to->qp_num; w.wr.ud.remote_qkey = 0x11111111;
	if (ibv_post_send(from, &w, &bad) || one(scq, &wc) != IBV_WC_SUCCESS)
		return -1;
	return 0;
}

/* The GRH area of slot `slot` holds the IP header of a datagram from
 * and to `g` (both ends on the same GID). */
static int grh_ok(int slot, union ibv_gid *g, int v4) {
	unsigned char *p = (unsigned char *)buf + slot * SLOT;
	static const unsigned char zero[20];
	if (v4)
		return !memcmp(p, zero, 20) && p[20] == 0x45 &&
		       !memcmp(p + 32, g->raw + 12, 4) && !memcmp(p + 36, g->raw + 12, 4);
	return p[0] >> 4 == 6 && !memcmp(p + 8, g->raw, 16) && !memcmp(p + 24, g->raw, 16);
}

static void check_gid(int idx, union ibv_gid *g, int v4) {
	char name[64];
	struct ibv_wc wc;
	int want = v4 ? 2 : 1, slot = idx * 2, r, got = -1;
	double end;

	/* qb -> qa: ibv_poll_cq's wc.sl. */
	r = recv_into(qa, slot) || send_to(qb, qa, idx, g) ? -3 : one(rcq, &wc);
	snprintf(name, sizeof name, "poll_cq_sl_gid%d", idx);
	CHECK(name, r == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && (wc.wc_flags & IBV_WC_GRH) &&
		    wc.sl == want && wc.src_qp == qb->qp_num && wc.byte_len == 40 + LEN,
	      "status %d sl %u (want %d) flags %#x src_qp %u len %u", r, wc.sl, want, wc.wc_flags,
	      wc.src_qp, wc.byte_len);
	snprintf(name, sizeof name, "grh_gid%d", idx);
	CHECK(name, r == IBV_WC_SUCCESS && grh_ok(slot, g, v4), "GRH area not the %s header", v4 ? "IPv4" : "IPv6");

	/* qa -> qb: the extended CQ's ibv_wc_read_sl. */
	r = recv_into(qb, slot + 1) || send_to(qa, qb, idx, g) ? -3 : -1;
	if (r == -1) {
		struct ibv_poll_cq_attr pa = { 0 };
		for (end = now() + 5; now() < end;) {
			int e = ibv_start_poll(rcqx, &pa);
			if (e == ENOENT)
				continue;
			if (e) { r = -2; break; }
			r = rcqx->status;
			got = ibv_wc_read_sl(rcqx);
			if (!(ibv_wc_read_wc_flags(rcqx) & IBV_WC_GRH))
				got = -4;
			ibv_end_poll(rcqx);
			break;
		}
	}
	snprintf(name, sizeof name, "read_sl_gid%d", idx);
	CHECK(name, r == IBV_WC_SUCCESS && got == want, "status %d sl %d (want %d)", r, got, want);
	snprintf(name, sizeof name, "ex_grh_gid%d", idx);
	CHECK(name, r == IBV_WC_SUCCESS && grh_ok(slot + 1, g, v4), "GRH area not the %s header", v4 ? "IPv4" : "IPv6");
}

/* Three SENDs built with ibv_wr_*: the first two with their UD address
 * (to qa over GID 0), the third without. */
static void builder_ud(union ibv_gid *g) {
	struct ibv_qp_init_attr_ex a = { .send_cq = scq, .recv_cq = scq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD, .sq_sig_all = 1,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND };
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
		.grh = { .dgid = *g, .sgid_index = 0, .hop_limit = 64 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	struct ibv_qp *qp = ready(ibv_create_qp_ex(ctx, &a));
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	struct ibv_wc wc;
	int i, rc, sent = 0, got = 0;

	if (!ah || !x || recv_into(qa, 12) || recv_into(qa, 13)) {
		printf("FAIL setup: builder UD: %s\n", strerror(errno));
		exit(100);
	}
	ibv_wr_start(x);
	for (i = 0; i < 3; i++) {
		x->wr_id = 200 + i;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(x);
		ibv_wr_set_sge(x, mr->lkey, (uintptr_t)(buf + 15 * SLOT), LEN);
		if (i < 2)
			ibv_wr_set_ud_addr(x, ah, qa->qp_num, 0x11111111);
	}
	rc = ibv_wr_complete(x);
	for (i = 0; i < 2; i++)
		sent += one(scq, &wc) == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(200 + i);
	for (i = 0; i < 2; i++)
		got += one(rcq, &wc) == IBV_WC_SUCCESS && wc.src_qp == qp->qp_num &&
		       wc.byte_len == 40 + LEN;
	CHECK("builder_ud", rc == EINVAL && sent == 2 && got == 2 && ibv_poll_cq(scq, 1, &wc) == 0,
	      "complete %d, %d sent, %d received", rc, sent, got);
}

int main(void) {
	union ibv_gid g0, g1;
	struct ibv_cq_init_attr_ex cx = { .cqe = 16, .wc_flags = IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_BYTE_LEN };
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	open_first_device();
	buf = calloc(16, SLOT);
	mr = ibv_reg_mr(pd, buf, 16 * SLOT, IBV_ACCESS_LOCAL_WRITE);
	scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	rcqx = ibv_create_cq_ex(ctx, &cx);
	if (!mr || !scq || !rcq || !rcqx || ibv_query_gid(ctx, 1, 0, &g0)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 100;
	}
	qa = ud_qp(rcq);
	qb = ud_qp(ibv_cq_ex_to_cq(rcqx));
	CHECK("gid0_is_ipv4", !memcmp(g0.raw, mapped, 12), "GID 0 is not IPv4-mapped");
	check_gid(0, &g0, 1);
	builder_ud(&g0);
	if (ibv_query_gid(ctx, 1, 1, &g1) == 0 && memcmp(g1.raw, mapped, 12))
		check_gid(1, &g1, 0);
	else
		printf("skip ipv6: no IPv6 GID 1\n");
	return failures ? 1 : 0;
}
