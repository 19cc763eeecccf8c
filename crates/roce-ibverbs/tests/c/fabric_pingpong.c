/* A libfabric ping-pong in the manner of fabtests' fi_pingpong /
 * fi_rdm_pingpong (Debian ships no fabtests): the verbs provider's MSG
 * endpoints (-e msg) or ofi_rxm's RDM endpoints over them (-e rdm),
 * with default provider settings.
 *
 *   fabric_pingpong server msg|rdm ADDR PORT COUNT SIZE
 *   fabric_pingpong client msg|rdm ADDR PORT COUNT SIZE
 *
 * The client sends COUNT messages of SIZE bytes, each filled from its
 * sequence number; the server checks each and sends it back, and the
 * client checks the echo. Prints "ok ..." lines; exits non-zero on the
 * first failure (and after 60 s in any case). */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define CHECK(call)                                                           \
	do {                                                                  \
		int ret_ = (call);                                            \
		if (ret_) {                                                   \
			fprintf(stderr, "FAIL %s: %d (%s)\n", #call, ret_,    \
				fi_strerror(-ret_));                          \
			exit(1);                                              \
		}                                                             \
	} while (0)

static struct fid_cq *cq;
static struct fid_ep *ep;
static struct fid_mr *mr;
static char *buf;
static size_t size;
static fi_addr_t peer = FI_ADDR_UNSPEC;

/* Waits for one completion on the CQ. */
static void wait_cq(const char *what)
{
	struct fi_cq_entry e;
	for (;;) {
		ssize_t n = fi_cq_read(cq, &e, 1);
		if (n == 1)
			return;
		if (n == -FI_EAGAIN)
			continue;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(cq, &err, 0);
			fprintf(stderr, "FAIL %s: completion error %d (%s) prov %d\n",
				what, err.err, fi_strerror(err.err), err.prov_errno);
		} else {
			fprintf(stderr, "FAIL %s: fi_cq_read %zd\n", what, n);
		}
		exit(1);
	}
}

static void post_recv(void)
{
	ssize_t r;
	while ((r = fi_recv(ep, buf, size, fi_mr_desc(mr), FI_ADDR_UNSPEC, NULL)) == -FI_EAGAIN)
		fi_cq_read(cq, NULL, 0);
	CHECK((int)r);
}

static void send_now(size_t len)
{
	ssize_t r;
	while ((r = fi_send(ep, buf + size, len, fi_mr_desc(mr), peer, NULL)) == -FI_EAGAIN)
		fi_cq_read(cq, NULL, 0);
	CHECK((int)r);
	wait_cq("send");
}

static void fill(char *p, int seq)
{
	for (size_t k = 0; k < size; k++)
		p[k] = (char)(seq * 31 + k);
}

static int check(const char *p, int seq)
{
	for (size_t k = 0; k < size; k++)
		if (p[k] != (char)(seq * 31 + k))
			return 0;
	return 1;
}

/* Waits for `want` on the EQ; returns the entry's info (FI_CONNREQ). */
static struct fi_info *wait_eq(struct fid_eq *eq, uint32_t want)
{
	struct fi_eq_cm_entry entry;
	uint32_t event;
	ssize_t n = fi_eq_sread(eq, &event, &entry, sizeof entry, 30000, 0);
	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err = {0};
		fi_eq_readerr(eq, &err, 0);
		fprintf(stderr, "FAIL eq: error %d (%s) prov %d\n", err.err,
			fi_strerror(err.err), err.prov_errno);
		exit(1);
	}
	if (n < 0 || event != want) {
		fprintf(stderr, "FAIL eq: got %zd event %u, wanted %u\n", n, event, want);
		exit(1);
	}
	return entry.info;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s server|client msg|rdm ADDR PORT COUNT SIZE\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	alarm(60);
	int server = !strcmp(argv[1], "server");
	int rdm = !strcmp(argv[2], "rdm");
	int count = atoi(argv[5]);
	size = (size_t)atol(argv[6]);

	struct fi_info *hints = fi_allocinfo(), *info;
	hints->ep_attr->type = rdm ? FI_EP_RDM : FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode =
		FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(rdm ? "verbs;ofi_rxm" : "verbs");
	hints->addr_format = FI_SOCKADDR_IN;
	CHECK(fi_getinfo(FI_VERSION(1, 9), argv[3], argv[4], server ? FI_SOURCE : 0,
			 hints, &info));
	printf("ok fi_getinfo %s domain %s\n", info->fabric_attr->prov_name,
	       info->domain_attr->name);

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq = NULL;
	struct fid_av *av = NULL;
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE};
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));

	struct fi_info *ep_info = info;
	if (!rdm) {
		CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
		if (server) {
			struct fid_pep *pep;
			CHECK(fi_passive_ep(fabric, info, &pep, NULL));
			CHECK(fi_pep_bind(pep, &eq->fid, 0));
			CHECK(fi_listen(pep));
			printf("ok listening\n");
			fflush(stdout);
			ep_info = wait_eq(eq, FI_CONNREQ);
		}
	}
	CHECK(fi_domain(fabric, ep_info, &domain, NULL));
	CHECK(fi_endpoint(domain, ep_info, &ep, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	if (rdm) {
		struct fi_av_attr av_attr = {.type = FI_AV_MAP};
		CHECK(fi_av_open(domain, &av_attr, &av, NULL));
		CHECK(fi_ep_bind(ep, &av->fid, 0));
	} else {
		CHECK(fi_ep_bind(ep, &eq->fid, 0));
	}
	CHECK(fi_enable(ep));

	buf = calloc(2, size + 256);
	CHECK(fi_mr_reg(domain, buf, 2 * (size + 256), FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
	post_recv();

	if (!rdm) {
		if (server)
			CHECK(fi_accept(ep, NULL, 0));
		else
			CHECK(fi_connect(ep, info->dest_addr, NULL, 0));
		wait_eq(eq, FI_CONNECTED);
		printf("ok connected\n");
	} else if (server) {
		printf("ok listening\n");
		fflush(stdout);
		/* The client's first message is its address. */
		wait_cq("recv address");
		CHECK(fi_av_insert(av, buf, 1, &peer, 0, NULL) == 1 ? 0 : -FI_EINVAL);
		post_recv();
		printf("ok peer address\n");
	} else {
		CHECK(fi_av_insert(av, info->dest_addr, 1, &peer, 0, NULL) == 1 ? 0 : -FI_EINVAL);
		size_t len = size;
		CHECK(fi_getname(&ep->fid, buf + size, &len));
		send_now(len);
	}
	fflush(stdout);

	struct timeval t0, t1;
	gettimeofday(&t0, NULL);
	for (int i = 0; i < count; i++) {
		if (server) {
			wait_cq("recv");
			if (!check(buf, i)) {
				fprintf(stderr, "FAIL message %d: wrong data\n", i);
				return 1;
			}
			memcpy(buf + size, buf, size);
			post_recv();
			send_now(size);
		} else {
			fill(buf + size, i);
			send_now(size);
			wait_cq("recv");
			if (!check(buf, i)) {
				fprintf(stderr, "FAIL echo %d: wrong data\n", i);
				return 1;
			}
			post_recv();
		}
	}
	gettimeofday(&t1, NULL);
	double us = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_usec - t0.tv_usec);
	printf("ok %s %s %d messages of %zu bytes checked, %.1f us per round trip\n",
	       argv[1], argv[2], count, size, us / (count ? count : 1));
	fflush(stdout);
	/* The client waits for nothing more; give the last send time to be
	 * acknowledged before the connection goes. */
	if (!server)
		usleep(100000);
	if (!rdm)
		fi_shutdown(ep, 0);
	fi_close(&ep->fid);
	fi_close(&mr->fid);
	fi_close(&cq->fid);
	if (av)
		fi_close(&av->fid);
	fi_close(&domain->fid);
	if (eq)
		fi_close(&eq->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
