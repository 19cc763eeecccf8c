/*
 * msgsend: a small rdma_cm program with the bugs docs/debugging.md's
 * walkthrough finds ("Finding a bug: a sender that ignores its
 * completions"); run by tests/exec_walkthrough.rs.
 *
 *   msgsend server ADDR PORT N [--post-first] [--retry] [--fixed]
 *   msgsend client ADDR PORT N [--check] [--retry] [--fixed]
 *
 * The client sends N messages of 4 KiB over an RC connection and prints
 * "client: sent N messages"; the server receives them and prints
 * "server: received K messages". Each ends within 30 s (alarm).
 *
 * As written it has three bugs of the kind people make:
 *  - conn_param() leaves rnr_retry_count (and retry_count) at 0, so the
 *    first RNR NAK the sender receives ends its QP in error;
 *  - the server posts its receives after rdma_accept, and only DEPTH of
 *    them, reposting each once it has looked at the message;
 *  - the client counts its completions without looking at wc.status.
 * --check:      the client checks wc.status (exits 1 on the first error,
 *               saying the QP's state);
 * --post-first: the server posts its receives before rdma_accept;
 * --retry:      conn_param() asks for retry_count and rnr_retry_count 7
 *               (the server's, in rdma_accept, is the one the client's
 *               QP gets: the REP carries it);
 * --fixed:      all three.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include "net_test.h"

#define SIZE 4096
#define DEPTH 4   /* receives the server keeps posted */
#define WINDOW 32 /* sends the client keeps in flight */

static int check, post_first, retry;

static struct rdma_conn_param conn_param(void)
{
	struct rdma_conn_param cp;

	memset(&cp, 0, sizeof cp);
	if (retry) {
		cp.retry_count = 7;
		cp.rnr_retry_count = 7; /* 7: retry RNR NAKs without limit */
	}
	return cp;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct rdma_addrinfo *resolve(const char *addr, const char *port, int passive)
{
	struct rdma_addrinfo hints, *res;

	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(addr, port, &hints, &res))
		die("rdma_getaddrinfo");
	return res;
}

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr qa;

	memset(&qa, 0, sizeof qa);
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = WINDOW;
	qa.cap.max_recv_wr = DEPTH;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	return qa;
}

static int server(const char *addr, const char *port, int n)
{
	struct rdma_addrinfo *res = resolve(addr, port, 1);
	struct ibv_qp_init_attr qa = qp_attr();
	struct rdma_conn_param cp = conn_param();
	struct rdma_cm_id *listen_id, *id;
	static char buf[DEPTH][SIZE];
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int i, got = 0;
	double idle;

	if (rdma_create_ep(&listen_id, res, NULL, &qa))
		die("rdma_create_ep");
	rdma_freeaddrinfo(res);
	if (rdma_listen(listen_id, 1))
		die("rdma_listen");
	printf("server: listening on %s:%s\n", addr, port);
	fflush(stdout);
	if (rdma_get_request(listen_id, &id))
		die("rdma_get_request");
	mr = rdma_reg_msgs(id, buf, sizeof buf);
	if (!mr)
		die("rdma_reg_msgs");
	if (post_first)
		for (i = 0; i < DEPTH; i++)
			if (rdma_post_recv(id, buf[i], buf[i], SIZE, mr))
				die("rdma_post_recv");
	if (rdma_accept(id, &cp))
		die("rdma_accept");
	if (!post_first)
		for (i = 0; i < DEPTH; i++)
			if (rdma_post_recv(id, buf[i], buf[i], SIZE, mr))
				die("rdma_post_recv");
	/* Until N messages, an error completion (the peer went away and
	 * the QP was flushed) or 2 s without a message. */
	idle = now() + 2;
	while (got < n && now() < idle) {
		int k = ibv_poll_cq(id->recv_cq, 1, &wc);

		if (k < 0)
			die("ibv_poll_cq");
		if (k == 0)
			continue;
		if (wc.status != IBV_WC_SUCCESS)
			break;
		got++;
		idle = now() + 2;
		/* "Look at" the message, then give the buffer back. */
		if (((char *)wc.wr_id)[0] != (char)('a' + (got - 1) % 26))
			printf("server: message %d out of order\n", got);
		if (rdma_post_recv(id, (void *)wc.wr_id, (void *)wc.wr_id, SIZE, mr))
			die("rdma_post_recv");
	}
	printf("server: received %d messages\n", got);
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	return 0;
}

static int client(const char *addr, const char *port, int n)
{
	struct rdma_addrinfo *res = resolve(addr, port, 0);
	struct ibv_qp_init_attr qa = qp_attr();
	struct rdma_conn_param cp = conn_param();
	static char buf[WINDOW][SIZE];
	int posted = 0, done = 0, failed = 0;
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	struct ibv_wc wc;

	if (rdma_create_ep(&id, res, NULL, &qa))
		die("rdma_create_ep");
	rdma_freeaddrinfo(res);
	mr = rdma_reg_msgs(id, buf, sizeof buf);
	if (!mr)
		die("rdma_reg_msgs");
	if (rdma_connect(id, &cp))
		die("rdma_connect");
	while (done < n) {
		while (posted < n && posted - done < WINDOW) {
			char *b = buf[posted % WINDOW];

			memset(b, 'a' + posted % 26, SIZE);
			if (rdma_post_send(id, (void *)(long)posted, b, SIZE, mr,
					   IBV_SEND_SIGNALED))
				die("rdma_post_send");
			posted++;
		}
		int k = ibv_poll_cq(id->send_cq, 1, &wc);

		if (k < 0)
			die("ibv_poll_cq");
		if (k == 0)
			continue;
		if (check && wc.status != IBV_WC_SUCCESS) {
			struct ibv_qp_attr a;
			struct ibv_qp_init_attr ia;

			fprintf(stderr, "client: message %d of %d failed: %s (status %d)\n",
				(int)wc.wr_id, n, ibv_wc_status_str(wc.status), wc.status);
			if (!ibv_query_qp(id->qp, &a, IBV_QP_STATE, &ia))
				fprintf(stderr, "client: QP 0x%x is in state %s\n", id->qp->qp_num,
					a.qp_state == IBV_QPS_ERR ? "ERR" : "not ERR");
			failed = 1;
			break;
		}
		done++;
	}
	if (!failed)
		printf("client: sent %d messages\n", done);
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	return failed;
}

int main(int argc, char **argv)
{
	int i;

	if (argc < 5) {
		fprintf(stderr, "usage: %s server|client ADDR PORT N [--check] [--post-first] [--retry] [--fixed]\n",
			argv[0]);
		return 2;
	}
	for (i = 5; i < argc; i++) {
		if (!strcmp(argv[i], "--check"))
			check = 1;
		else if (!strcmp(argv[i], "--post-first"))
			post_first = 1;
		else if (!strcmp(argv[i], "--retry"))
			retry = 1;
		else if (!strcmp(argv[i], "--fixed"))
			check = post_first = retry = 1;
		else {
			fprintf(stderr, "unknown option %s\n", argv[i]);
			return 2;
		}
	}
	alarm(30);
	if (!strcmp(argv[1], "server"))
		return server(argv[2], argv[3], atoi(argv[4]));
	return client(argv[2], argv[3], atoi(argv[4]));
}
