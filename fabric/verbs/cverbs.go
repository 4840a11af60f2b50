//go:build verbs

package verbs

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>

_Static_assert(IBV_WC_REM_ACCESS_ERR == 10, "ibv_wc_status layout changed");
_Static_assert(IBV_WC_RETRY_EXC_ERR == 12, "ibv_wc_status layout changed");
_Static_assert(IBV_WC_GENERAL_ERR == 21, "ibv_wc_status layout changed");

// sl_open opens the device called name (the first one when name is empty).
static struct ibv_context *sl_open(const char *name, int *ndev) {
	struct ibv_device **list = ibv_get_device_list(ndev);
	if (list == NULL) {
		*ndev = 0;
		return NULL;
	}
	struct ibv_context *ctx = NULL;
	for (int i = 0; i < *ndev; i++) {
		if (name[0] == 0 || strcmp(ibv_get_device_name(list[i]), name) == 0) {
			ctx = ibv_open_device(list[i]);
			break;
		}
	}
	ibv_free_device_list(list);
	return ctx;
}

static int sl_nonblock(int fd) {
	int flags = fcntl(fd, F_GETFL);
	return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static struct ibv_srq *sl_create_srq(struct ibv_pd *pd, int depth) {
	struct ibv_srq_init_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.attr.max_wr = depth;
	attr.attr.max_sge = 1;
	return ibv_create_srq(pd, &attr);
}

static struct ibv_qp *sl_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq, int send_depth) {
	struct ibv_qp_init_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.send_cq = cq;
	attr.recv_cq = cq;
	attr.srq = srq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = send_depth;
	attr.cap.max_send_sge = 1;
	attr.cap.max_inline_data = 64;
	return ibv_create_qp(pd, &attr);
}

static int sl_qp_init(struct ibv_qp *qp, int port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int sl_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t dqpn, uint32_t rpsn,
                     uint16_t dlid, const uint8_t *dgid, int gid_index, int dest_rd_atomic) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = dest_rd_atomic;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = dlid;
	a.ah_attr.port_num = port;
	int global = 0;
	for (int i = 0; i < 16; i++) global |= dgid[i];
	if (global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int sl_qp_rts(struct ibv_qp *qp, uint32_t spsn, int rd_atomic) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = spsn;
	a.max_rd_atomic = rd_atomic;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
	                     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int sl_port(struct ibv_context *ctx, int port, uint16_t *lid, int *mtu, int gid_index, uint8_t *gid) {
	struct ibv_port_attr pa;
	int rc = ibv_query_port(ctx, port, &pa);
	if (rc) return rc;
	*lid = pa.lid;
	*mtu = pa.active_mtu;
	union ibv_gid g;
	rc = ibv_query_gid(ctx, port, gid_index, &g);
	if (rc) return rc;
	memcpy(gid, g.raw, 16);
	return 0;
}

// sl_reg registers memory. zero_based regions are addressed by offset, by
// peers and in local scatter entries alike; the others by virtual address.
static struct ibv_mr *sl_reg(struct ibv_pd *pd, void *addr, size_t len, int access, int zero_based) {
	if (zero_based) return ibv_reg_mr_iova(pd, addr, len, 0, access);
	return ibv_reg_mr(pd, addr, len, access);
}

static int sl_caps(struct ibv_context *ctx, int *max_rd, int *max_init_rd, int *max_qp_wr) {
	struct ibv_device_attr a;
	int rc = ibv_query_device(ctx, &a);
	if (rc) return rc;
	*max_rd = a.max_qp_rd_atom;
	*max_init_rd = a.max_qp_init_rd_atom;
	*max_qp_wr = a.max_qp_wr;
	return 0;
}

static int sl_qp_err(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int sl_post_recv(struct ibv_srq *srq, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad;
	return ibv_post_srq_recv(srq, &wr, &bad);
}

static int sl_post_send(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | (len <= 64 ? IBV_SEND_INLINE : 0);
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, &wr, &bad);
}

// sl_post_rdma posts n linked RDMA READs (write == 0) or WRITEs; only the
// last is signaled: on an RC queue pair completions arrive in order, so its
// completion reports the whole chain, and an error in any flushes the rest.
static int sl_post_rdma(struct ibv_qp *qp, uint64_t wr_id, int write, int n, uint64_t *laddr,
                        uint32_t *len, uint32_t *lkey, uint64_t *raddr, uint32_t *rkey) {
	struct ibv_sge sge[64];
	struct ibv_send_wr wr[64];
	if (n < 1 || n > 64) return EINVAL;
	memset(wr, 0, sizeof(struct ibv_send_wr) * n);
	for (int i = 0; i < n; i++) {
		sge[i].addr = laddr[i];
		sge[i].length = len[i];
		sge[i].lkey = lkey[i];
		wr[i].wr_id = wr_id;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = len[i] ? 1 : 0;
		wr[i].opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
		wr[i].wr.rdma.remote_addr = raddr[i];
		wr[i].wr.rdma.rkey = rkey[i];
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	wr[n - 1].send_flags = IBV_SEND_SIGNALED;
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, wr, &bad);
}

// sl_poll drains up to n completions in one call.
// sl_poll drains up to n completions in one call. Only wr_id, status,
// qp_num (and byte_len on success) are valid on every completion, so the
// kind of request is told by wr_id, not opcode.
static int sl_poll(struct ibv_cq *cq, int n, uint64_t *wr_id, int *status, uint32_t *byte_len,
                   uint32_t *qp_num) {
	struct ibv_wc wc[64];
	if (n > 64) n = 64;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		wr_id[i] = wc[i].wr_id;
		status[i] = wc[i].status;
		byte_len[i] = wc[i].byte_len;
		qp_num[i] = wc[i].qp_num;
	}
	return got;
}

static int sl_arm(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// sl_block waits up to timeout_ms for a completion event on an armed CQ.
// It returns 1 on an event, 0 on timeout, -1 on error.
static int sl_block(struct ibv_comp_channel *ch, int timeout_ms) {
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	int rc = poll(&p, 1, timeout_ms);
	if (rc <= 0) return rc < 0 && errno != EINTR ? -1 : 0;
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx)) return errno == EAGAIN ? 0 : -1;
	ibv_ack_cq_events(ev_cq, 1);
	return 1;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"
)

// ErrNoDevice: the machine has no RDMA device (or none by the configured name).
var ErrNoDevice = errors.New("verbs: no RDMA device")

// device is an opened RDMA device with the resources every endpoint needs:
// protection domain, one completion queue (send and receive) with its event
// channel, and a shared receive queue.
type device struct {
	ctx     *C.struct_ibv_context
	pd      *C.struct_ibv_pd
	channel *C.struct_ibv_comp_channel
	cq      *C.struct_ibv_cq
	srq     *C.struct_ibv_srq
	name    string
	port    int
	lid     uint16
	mtu     uint8
	gid     [16]byte
	gidIdx  int
}

func openDevice(name string, port, gidIndex, cqDepth, srqDepth int) (*device, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var ndev C.int
	ctx := C.sl_open(cname, &ndev)
	if ctx == nil {
		if ndev == 0 {
			return nil, fmt.Errorf("%w: ibv_get_device_list found none", ErrNoDevice)
		}
		return nil, fmt.Errorf("%w: none of the %d devices is called %q", ErrNoDevice, int(ndev), name)
	}
	d := &device{ctx: ctx, name: C.GoString(C.ibv_get_device_name(ctx.device)), port: port, gidIdx: gidIndex}
	fail := func(what string, err error) (*device, error) {
		d.close()
		return nil, fmt.Errorf("verbs: %s on %s: %w", what, d.name, err)
	}
	var lid C.uint16_t
	var mtu C.int
	if rc := C.sl_port(ctx, C.int(port), &lid, &mtu, C.int(gidIndex), (*C.uint8_t)(unsafe.Pointer(&d.gid[0]))); rc != 0 {
		return fail(fmt.Sprintf("query port %d", port), syscall.Errno(rc))
	}
	d.lid, d.mtu = uint16(lid), uint8(mtu)
	if d.pd = C.ibv_alloc_pd(ctx); d.pd == nil {
		return fail("allocate protection domain", syscall.ENOMEM)
	}
	if d.channel = C.ibv_create_comp_channel(ctx); d.channel == nil {
		return fail("create completion channel", syscall.ENOMEM)
	}
	C.sl_nonblock(d.channel.fd)
	if d.cq = C.ibv_create_cq(ctx, C.int(cqDepth), nil, d.channel, 0); d.cq == nil {
		return fail("create completion queue", syscall.ENOMEM)
	}
	if d.srq = C.sl_create_srq(d.pd, C.int(srqDepth)); d.srq == nil {
		return fail("create shared receive queue", syscall.ENOMEM)
	}
	return d, nil
}

func (d *device) close() {
	if d.srq != nil {
		C.ibv_destroy_srq(d.srq)
	}
	if d.cq != nil {
		C.ibv_destroy_cq(d.cq)
	}
	if d.channel != nil {
		C.ibv_destroy_comp_channel(d.channel)
	}
	if d.pd != nil {
		C.ibv_dealloc_pd(d.pd)
	}
	if d.ctx != nil {
		C.ibv_close_device(d.ctx)
	}
}

// memoryRegion is an ibv_mr over memory from AllocMemory.
type memoryRegion struct {
	mr        *C.struct_ibv_mr
	buf       []byte
	zeroBased bool
}

// register registers buf. Regions peers address (remote access) are
// zero-based, so a RemoteBuf's offset is the remote address; the
// transport's own buffers are addressed by virtual address.
func (d *device) register(buf []byte, remoteRead, remoteWrite bool) (*memoryRegion, error) {
	access := C.int(C.IBV_ACCESS_LOCAL_WRITE)
	if remoteRead {
		access |= C.IBV_ACCESS_REMOTE_READ
	}
	if remoteWrite {
		access |= C.IBV_ACCESS_REMOTE_WRITE
	}
	zero := remoteRead || remoteWrite
	z := C.int(0)
	if zero {
		z = 1
	}
	mr := C.sl_reg(d.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)), access, z)
	if mr == nil {
		return nil, fmt.Errorf("verbs: register %d bytes on %s: ibv_reg_mr failed (is ulimit -l high enough?)", len(buf), d.name)
	}
	return &memoryRegion{mr: mr, buf: buf, zeroBased: zero}, nil
}

// localAddr is the address a scatter entry uses for b, which lies in m.
func (m *memoryRegion) localAddr(b []byte) uintptr {
	if m.zeroBased {
		return addrOf(b) - addrOf(m.buf)
	}
	return addrOf(b)
}

// caps returns the device's limits on RDMA READs in flight per queue pair
// (as responder and as initiator) and on work requests per queue.
func (d *device) caps() (maxRd, maxInitRd, maxWR int, err error) {
	var a, b, c C.int
	if rc := C.sl_caps(d.ctx, &a, &b, &c); rc != 0 {
		return 0, 0, 0, fmt.Errorf("verbs: query device %s: %w", d.name, syscall.Errno(rc))
	}
	return int(a), int(b), int(c), nil
}

func (m *memoryRegion) lkey() uint32 { return uint32(m.mr.lkey) }
func (m *memoryRegion) rkey() uint32 { return uint32(m.mr.rkey) }

func (m *memoryRegion) deregister() error {
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return fmt.Errorf("verbs: deregister: %w", syscall.Errno(rc))
	}
	return nil
}

// queuePair is one RC queue pair.
type queuePair struct {
	qp   *C.struct_ibv_qp
	once sync.Once
}

func (d *device) createQP(sendDepth int) (*queuePair, error) {
	qp := C.sl_create_qp(d.pd, d.cq, d.srq, C.int(sendDepth))
	if qp == nil {
		return nil, fmt.Errorf("verbs: create queue pair on %s failed", d.name)
	}
	if rc := C.sl_qp_init(qp, C.int(d.port)); rc != 0 {
		C.ibv_destroy_qp(qp)
		return nil, fmt.Errorf("verbs: queue pair to INIT: %w", syscall.Errno(rc))
	}
	return &queuePair{qp: qp}, nil
}

func (q *queuePair) num() uint32 { return uint32(q.qp.qp_num) }

// connect moves the queue pair INIT -> RTR -> RTS towards the peer. We
// accept local.OneSided READs from the peer (responder depth) and issue at
// most as many as the peer accepts (initiator depth).
func (q *queuePair) connect(d *device, local, remote qpInfo) error {
	mtu := min(local.MTU, remote.MTU)
	if rc := C.sl_qp_rtr(q.qp, C.int(d.port), C.int(mtu), C.uint32_t(remote.QPN), C.uint32_t(remote.PSN),
		C.uint16_t(remote.LID), (*C.uint8_t)(unsafe.Pointer(&remote.GID[0])), C.int(d.gidIdx), C.int(local.OneSided)); rc != 0 {
		return fmt.Errorf("verbs: queue pair to RTR: %w", syscall.Errno(rc))
	}
	if rc := C.sl_qp_rts(q.qp, C.uint32_t(local.PSN), C.int(min(local.OneSided, remote.OneSided))); rc != 0 {
		return fmt.Errorf("verbs: queue pair to RTS: %w", syscall.Errno(rc))
	}
	return nil
}

func (q *queuePair) destroy() { q.once.Do(func() { C.ibv_destroy_qp(q.qp) }) }

// toError moves the queue pair to the error state: every outstanding work
// request completes with a flush error, promptly.
func (q *queuePair) toError() { C.sl_qp_err(q.qp) }

// recvBit marks the work-request ids of receives, so a completion's kind is
// known even when only its id and status are valid.
const recvBit = 1 << 63

func (d *device) postRecv(id uint64, buf []byte, lkey uint32) error {
	if rc := C.sl_post_recv(d.srq, C.uint64_t(id|recvBit), unsafe.Pointer(&buf[0]), C.uint32_t(len(buf)), C.uint32_t(lkey)); rc != 0 {
		return fmt.Errorf("verbs: post receive: %w", syscall.Errno(rc))
	}
	return nil
}

func (q *queuePair) postSend(id uint64, buf []byte, lkey uint32) error {
	if rc := C.sl_post_send(q.qp, C.uint64_t(id), unsafe.Pointer(&buf[0]), C.uint32_t(len(buf)), C.uint32_t(lkey)); rc != 0 {
		return fmt.Errorf("verbs: post send: %w", syscall.Errno(rc))
	}
	return nil
}

// rdmaOp is one range of a posted one-sided batch.
type rdmaOp struct {
	laddr uintptr
	len   uint32
	lkey  uint32
	raddr uint64
	rkey  uint32
}

// postRDMA posts ops as one linked chain with a single signaled completion.
func (q *queuePair) postRDMA(id uint64, write bool, ops []rdmaOp) error {
	n := len(ops)
	laddr := make([]C.uint64_t, n)
	lens := make([]C.uint32_t, n)
	lkeys := make([]C.uint32_t, n)
	raddr := make([]C.uint64_t, n)
	rkeys := make([]C.uint32_t, n)
	for i, op := range ops {
		laddr[i], lens[i], lkeys[i] = C.uint64_t(op.laddr), C.uint32_t(op.len), C.uint32_t(op.lkey)
		raddr[i], rkeys[i] = C.uint64_t(op.raddr), C.uint32_t(op.rkey)
	}
	w := C.int(0)
	if write {
		w = 1
	}
	if rc := C.sl_post_rdma(q.qp, C.uint64_t(id), w, C.int(n), &laddr[0], &lens[0], &lkeys[0], &raddr[0], &rkeys[0]); rc != 0 {
		return fmt.Errorf("verbs: post RDMA: %w", syscall.Errno(rc))
	}
	return nil
}

// pollBatch is how many completions one cgo call drains at most.
const pollBatch = 64

type pollBuf struct {
	wrID    [pollBatch]C.uint64_t
	status  [pollBatch]C.int
	byteLen [pollBatch]C.uint32_t
	qpNum   [pollBatch]C.uint32_t
}

// poll drains up to pollBatch completions into out.
func (d *device) poll(b *pollBuf, out []completion) []completion {
	n := int(C.sl_poll(d.cq, pollBatch, &b.wrID[0], &b.status[0], &b.byteLen[0], &b.qpNum[0]))
	for i := 0; i < n; i++ {
		id := uint64(b.wrID[i])
		out = append(out, completion{
			wrID: id &^ recvBit, status: wcStatus(b.status[i]), byteLen: uint32(b.byteLen[i]),
			qpNum: uint32(b.qpNum[i]), recv: id&recvBit != 0,
		})
	}
	return out
}

// arm asks for an event at the next completion.
func (d *device) arm() error {
	if rc := C.sl_arm(d.cq); rc != 0 {
		return fmt.Errorf("verbs: arm completion queue on %s: %w", d.name, syscall.Errno(rc))
	}
	return nil
}

// block waits up to timeoutMs for a completion event on the armed queue.
func (d *device) block(timeoutMs int) error {
	if rc := C.sl_block(d.channel, C.int(timeoutMs)); rc < 0 {
		return fmt.Errorf("verbs: wait for completions on %s failed", d.name)
	}
	return nil
}

// addrOf is the address of b's first byte, for posting.
func addrOf(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}
