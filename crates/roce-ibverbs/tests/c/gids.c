/*
 * The GID table of a context on loopback, from C: GID 0 is the
 * context's address and GID 1 the device's IPv6 address (::1), as
 * `roce devinfo` lists them; an RDMA WRITE between two QPs whose
 * sgid_index is 1 goes over ::1 and lands; an index beyond the table is
 * EINVAL; ibv_resolve_eth_l2_from_gid answers for this host's addresses
 * and fails cleanly for the others.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; the exit status is
 * the number of failures. Built and run by tests/gids.rs (which skips
 * it when the loopback interface has no IPv6 address), with ROCE_ADDR
 * and ROCE_PORT set.
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

int main(void) {
	open_first_device();
	page = sysconf(_SC_PAGESIZE);
	struct ibv_port_attr pa;
	ibv_query_port(ctx, 1, &pa);

	union ibv_gid g0, g1, g2;
	static const uint8_t v6_lo[16] = { [15] = 1 };
	const char *want0 = getenv("ROCE_ADDR");
	char have0[64] = "";
	int r0 = ibv_query_gid(ctx, 1, 0, &g0), r1 = ibv_query_gid(ctx, 1, 1, &g1);
	if (!r0) snprintf(have0, sizeof(have0), "%d.%d.%d.%d", g0.raw[12], g0.raw[13], g0.raw[14], g0.raw[15]);
	CHECK("gid_table", pa.gid_tbl_len == 2 && !r0 && !r1 && want0 && !strcmp(have0, want0) &&
	      !memcmp(g1.raw, v6_lo, 16), "len %d gid0 %s (want %s) rc %d %d", pa.gid_tbl_len, have0,
	      want0 ? want0 : "?", r0, r1);
	errno = 0;
	CHECK("gid_beyond_table", ibv_query_gid(ctx, 1, 2, &g2) == -1 && errno == EINVAL, "errno %d", errno);
	struct ibv_gid_entry e[4];
	ssize_t k = ibv_query_gid_table(ctx, e, 4, 0);
	CHECK("gid_table_entries", k == 2 && e[1].gid_index == 1 && e[1].gid_type == IBV_GID_TYPE_ROCE_V2 &&
	      !memcmp(e[1].gid.raw, v6_lo, 16), "%zd entries", k);
	struct ibv_gid_entry one_e;
	CHECK("gid_ex", ibv_query_gid_ex(ctx, 1, 1, &one_e, 0) == 0 && ibv_query_gid_ex(ctx, 1, 2, &one_e, 0) == ENODATA,
	      "not 0 then ENODATA");

	/* Two QPs of this context connected over GID 1: a WRITE over ::1. */
	gid = g1;
	sgid_index = 1;
	char *src = malloc(page), *dst = calloc(1, page);
	memset(src, 0x47, page);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, page, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = requester(cq);
	struct ibv_wc wc;
	write_to(qp, smr, (uintptr_t)dst, dmr->rkey);
	int st = one(cq, &wc);
	CHECK("write_over_gid_1", st == IBV_WC_SUCCESS && dst[0] == 0x47 && dst[63] == 0x47, "status %d", st);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	ibv_query_qp(qp, &qa, IBV_QP_AV, &qia);
	CHECK("query_qp_sgid", qa.ah_attr.grh.sgid_index == 1, "sgid_index %d", qa.ah_attr.grh.sgid_index);

	/* An index beyond the table: EINVAL from modify_qp and create_ah. */
	sgid_index = 2;
	struct ibv_qp *bad = rc_qp(cq);
	CHECK("modify_sgid_beyond_table", connect_qp(bad, qp->qp_num) != 0, "RTR accepted GID 2");
	struct ibv_ah_attr ah = { .is_global = 1, .port_num = 1 };
	ah.grh.dgid = g1; ah.grh.sgid_index = 2; ah.grh.hop_limit = 64;
	errno = 0;
	CHECK("ah_sgid_beyond_table", ibv_create_ah(pd, &ah) == NULL && errno == EINVAL, "errno %d", errno);
	ah.grh.sgid_index = 1;
	struct ibv_ah *ok_ah = ibv_create_ah(pd, &ah);
	CHECK("ah_sgid_1", ok_ah != NULL && ibv_destroy_ah(ok_ah) == 0, "errno %d", errno);

	/* Layer 2: this host's addresses are the loopback interface's (an
	 * all-zero MAC), no VLAN; elsewhere unreachable; bad input EINVAL. */
	uint8_t mac[6] = { 1, 1, 1, 1, 1, 1 };
	uint16_t vid = 0;
	ah.grh.dgid = g0; ah.grh.sgid_index = 0;
	int rc = ibv_resolve_eth_l2_from_gid(ctx, &ah, mac, &vid);
	static const uint8_t zero[6];
	CHECK("l2_local", rc == 0 && !memcmp(mac, zero, 6) && vid == 0xffff, "rc %d vid %x", rc, vid);
	ah.grh.dgid = g1; ah.grh.sgid_index = 1;
	rc = ibv_resolve_eth_l2_from_gid(ctx, &ah, mac, NULL);
	CHECK("l2_local_v6", rc == 0, "rc %d", rc);
	memset(ah.grh.dgid.raw, 0, 16);
	ah.grh.dgid.raw[10] = ah.grh.dgid.raw[11] = 0xff;
	ah.grh.dgid.raw[12] = 192; ah.grh.dgid.raw[13] = 0; ah.grh.dgid.raw[14] = 2; ah.grh.dgid.raw[15] = 77;
	ah.grh.sgid_index = 0;
	rc = ibv_resolve_eth_l2_from_gid(ctx, &ah, mac, &vid);
	CHECK("l2_unreachable", rc == -EHOSTUNREACH, "rc %d", rc);
	ah.grh.sgid_index = 1;
	CHECK("l2_family_mismatch", ibv_resolve_eth_l2_from_gid(ctx, &ah, mac, &vid) == -EINVAL, "not -EINVAL");
	ah.grh.sgid_index = 9;
	CHECK("l2_bad_index", ibv_resolve_eth_l2_from_gid(ctx, &ah, mac, &vid) == -EINVAL, "not -EINVAL");
	return failures;
}
