package nemesis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/rpc"
)

// ClusterConfig describes the cluster under test. Zero fields take the
// defaults in brackets.
type ClusterConfig struct {
	Bin       string // the sluice binary
	Dir       string // everything of the run: configs, data, logs
	Metas     int    // meta replicas [3]
	Nodes     int    // storage nodes, one target each [4]
	Replicas  int    // chain length [3]
	ChunkSize int    // [64 KiB]
	Stripe    int    // [4]
	LogLevel  string // each process's --log-level [info]
	// SnapshotEvery is the meta replicas' snapshot_every [64: often, so
	// that replicas restarted or cut off under the faults catch up from
	// snapshots, not only from logs]; negative: the server's default.
	SnapshotEvery int
	// Tmpfs targets get a tmpfs of TmpfsSize bytes [256 MiB] mounted as
	// their directory before the first start, so that their disk can be
	// filled (FillDisk); mounting needs root.
	Tmpfs     []uint32
	TmpfsSize int64
	// Event records what the cluster saw (a process exiting on its own).
	Event  func(kind, fault, format string, args ...any)
	Logger *slog.Logger
}

// Cluster is the processes of one run.
type Cluster struct {
	cfg   ClusterConfig
	Token string
	Metas []*Proc
	Nodes []*Proc // Nodes[i] serves target i+1
	// Mounted tmpfs directories (unmounted by Close).
	mounts []string

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn
	admin  *rpc.LeaderConn
}

// Proc is one `sluice server` process, restartable at the same address
// on the same directory.
type Proc struct {
	Name   string
	Role   string // meta or storage
	Addr   string // gRPC (meta) or fabric (storage) address
	Raft   string // meta only
	Target uint32 // storage only
	Dir    string
	Log    string // stdout and stderr of every incarnation, appended

	bin, config, level string
	event              func(kind, fault, format string, args ...any)

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current incarnation ends
	ready    bool          // the current incarnation said it serves
	paused   bool
	expected bool // the harness ended it
	wg       sync.WaitGroup
}

// StartCluster writes the configs, mounts the tmpfs targets and starts
// every process; it does not wait for them to be ready (WaitServing).
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Metas <= 0 {
		cfg.Metas = 3
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 4
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 3
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 64 << 10
	}
	if cfg.Stripe <= 0 {
		cfg.Stripe = 4
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = 64
	}
	if cfg.TmpfsSize <= 0 {
		cfg.TmpfsSize = 256 << 20
	}
	if cfg.Event == nil {
		cfg.Event = func(string, string, string, ...any) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{cfg: cfg, conns: map[string]*grpc.ClientConn{}}
	fail := func(err error) (*Cluster, error) {
		c.Close()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, ownerFile), []byte(fmt.Sprintln(os.Getpid())), 0o644); err != nil {
		return fail(fmt.Errorf("start cluster: %w", err))
	}
	if err := removeStaleMounts(); err != nil {
		cfg.Logger.Warn("nemesis: stale tmpfs mounts of earlier runs", "err", err)
	}
	c.Token = fmt.Sprintf("nemesis-%016x%016x", rand.Uint64(), rand.Uint64())
	tokenFile := filepath.Join(cfg.Dir, "token")
	if err := os.WriteFile(tokenFile, []byte(c.Token+"\n"), 0o600); err != nil {
		return fail(fmt.Errorf("start cluster: %w", err))
	}
	used := map[string]bool{}
	members := map[string]string{}
	var listens []string
	for i := 1; i <= cfg.Metas; i++ {
		p := &Proc{Name: fmt.Sprint("m", i), Role: "meta", Raft: freeAddr(used), Addr: freeAddr(used)}
		members[p.Name] = p.Raft
		listens = append(listens, p.Addr)
		c.Metas = append(c.Metas, p)
	}
	for i := 1; i <= cfg.Nodes; i++ {
		c.Nodes = append(c.Nodes, &Proc{Name: fmt.Sprint("s", i), Role: "storage", Addr: freeAddr(used), Target: uint32(i)})
	}
	cluster := strings.Join(listens, ",")
	for _, p := range append(append([]*Proc(nil), c.Metas...), c.Nodes...) {
		p.Dir = filepath.Join(cfg.Dir, p.Name)
		p.Log = filepath.Join(cfg.Dir, p.Name+".log")
		p.config = filepath.Join(cfg.Dir, p.Name+".json")
		p.bin, p.level, p.event = cfg.Bin, cfg.LogLevel, cfg.Event
		conf := map[string]any{"dir": p.Dir, "token_file": tokenFile}
		if p.Role == "meta" {
			conf["meta"] = map[string]any{"id": p.Name, "raft_bind": p.Raft, "listen": p.Addr, "members": members,
				"chunk_size": cfg.ChunkSize, "stripe": cfg.Stripe, "expect_targets": cfg.Nodes, "replicas": cfg.Replicas}
			if cfg.SnapshotEvery > 0 {
				conf["meta"].(map[string]any)["snapshot_every"] = cfg.SnapshotEvery
			}
		} else {
			conf["storage"] = map[string]any{"cluster": cluster, "node_id": p.Name, "fabric_listen": p.Addr,
				"targets": []uint32{p.Target}, "chunk_size": cfg.ChunkSize}
		}
		b, _ := json.MarshalIndent(conf, "", "  ")
		if err := os.WriteFile(p.config, b, 0o644); err != nil {
			return fail(fmt.Errorf("start cluster: %w", err))
		}
	}
	for _, id := range cfg.Tmpfs {
		dir := TargetDir(c.Node(id).Dir, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail(fmt.Errorf("start cluster: %w", err))
		}
		if out, err := exec.CommandContext(ctx, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", cfg.TmpfsSize), "tmpfs", dir).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("start cluster: mount a tmpfs on %s: %v: %s", dir, err, out))
		}
		c.mounts = append(c.mounts, dir)
	}
	var err error
	if c.admin, err = rpc.Dial(cluster, auth.Credentials(c.Token)); err != nil {
		return fail(fmt.Errorf("start cluster: %w", err))
	}
	for _, p := range c.Metas {
		if err := p.Start(); err != nil {
			return fail(err)
		}
	}
	for _, p := range c.Nodes {
		if err := p.Start(); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// freeAddr picks a loopback port below the usual ephemeral range (so an
// outgoing connection cannot take it while its process is down) that
// nothing listens on now.
func freeAddr(used map[string]bool) string {
	for {
		a := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		if used[a] {
			continue
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			continue
		}
		ln.Close()
		used[a] = true
		return a
	}
}

// MetaAddrs is the control plane's gRPC addresses, comma-separated.
func (c *Cluster) MetaAddrs() string {
	var a []string
	for _, p := range c.Metas {
		a = append(a, p.Addr)
	}
	return strings.Join(a, ",")
}

// Node is the storage process serving target id.
func (c *Cluster) Node(id uint32) *Proc { return c.Nodes[id-1] }

// Procs is every process, metas first.
func (c *Cluster) Procs() []*Proc { return append(append([]*Proc(nil), c.Metas...), c.Nodes...) }

func (c *Cluster) conn(addr string) (*grpc.ClientConn, error) {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if cc := c.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), auth.Credentials(c.Token))
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// Leader is the meta replica that says it leads the group, asking each.
func (c *Cluster) Leader(ctx context.Context) (*Proc, error) {
	for _, p := range c.Metas {
		if !p.Running() {
			continue
		}
		cc, err := c.conn(p.Addr)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := metapb.NewMetaClient(cc).Status(cctx, &metapb.StatusRequest{})
		cancel()
		if err == nil && st.State == "Leader" {
			return p, nil
		}
	}
	return nil, errors.New("no meta replica says it leads")
}

// ClusterMap is the newest cluster map any running replica holds.
func (c *Cluster) ClusterMap(ctx context.Context) (*mgmtdpb.ClusterMap, error) {
	var best *mgmtdpb.ClusterMap
	var errs []error
	for _, p := range c.Metas {
		if !p.Running() {
			continue
		}
		cc, err := c.conn(p.Addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := mgmtdpb.NewMgmtdClient(cc).GetClusterMap(cctx, &mgmtdpb.Empty{})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
			continue
		}
		if best == nil || m.Version > best.Version {
			best = m
		}
	}
	if best == nil {
		return nil, fmt.Errorf("cluster map: %w", errors.Join(errs...))
	}
	return best, nil
}

// AllServing reports whether m has its chain table and every target
// serves, in the map and in each of its chains, with room to write.
func AllServing(m *mgmtdpb.ClusterMap, targets, replicas int) bool {
	if len(m.GetTables()) == 0 || len(m.Targets) < targets {
		return false
	}
	for _, t := range m.Targets {
		if t.State != mgmtdpb.TargetState_SERVING || t.Full {
			return false
		}
	}
	for _, ch := range m.Chains {
		if len(ch.Targets) != replicas {
			return false
		}
		for _, s := range ch.States {
			if s != mgmtdpb.TargetState_SERVING {
				return false
			}
		}
	}
	return true
}

// DescribeMap is a map in one line per chain.
func DescribeMap(m *mgmtdpb.ClusterMap) string {
	if m == nil {
		return "no map"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "map v%d:", m.Version)
	for _, t := range m.Targets {
		fmt.Fprintf(&b, " target %d %v", t.Id, t.State)
		if t.Full {
			b.WriteString(" (full)")
		}
		b.WriteString(";")
	}
	for _, ch := range m.Chains {
		fmt.Fprintf(&b, " chain %d v%d %v %v;", ch.Id, ch.Version, ch.Targets, ch.States)
	}
	return b.String()
}

// Settle is how long the map must show every target serving, unchanged,
// for the cluster to count as recovered: a lease, so that a node that
// stopped heartbeating would have lost its targets meanwhile.
const Settle = 3 * time.Second

// WaitServing waits up to within for every process to be ready and then
// for AllServing to hold, at one map version, for Settle. It returns the
// map and how long it took until the settled stretch began.
func (c *Cluster) WaitServing(ctx context.Context, within time.Duration) (*mgmtdpb.ClusterMap, time.Duration, error) {
	start := time.Now()
	var last *mgmtdpb.ClusterMap
	var lastErr error
	var since time.Time // the settled stretch's start
	for {
		var unready []string
		for _, p := range c.Procs() {
			if !p.Ready() {
				unready = append(unready, p.Name)
			}
		}
		m, err := c.ClusterMap(ctx)
		switch {
		case err != nil:
			lastErr, since = err, time.Time{}
		case len(unready) > 0:
			last, since = m, time.Time{}
			lastErr = fmt.Errorf("not ready: %v", unready)
		case !AllServing(m, len(c.Nodes), c.cfg.Replicas) || last == nil || m.Version != last.Version:
			last, since = m, time.Time{}
			if AllServing(m, len(c.Nodes), c.cfg.Replicas) {
				since = time.Now()
			}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= Settle:
			return m, since.Sub(start), nil
		}
		if time.Since(start) > within || ctx.Err() != nil {
			return last, time.Since(start), fmt.Errorf("not every target serving within %v: %s (last error: %v)", within, DescribeMap(last), lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop ends every process with SIGTERM (SIGKILL after wait), storage
// first.
func (c *Cluster) Stop(wait time.Duration) error {
	var errs []error
	for _, group := range [][]*Proc{c.Nodes, c.Metas} {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, p := range group {
			wg.Go(func() {
				if err := p.Stop(wait); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	return errors.Join(errs...)
}

// Close kills whatever still runs, closes connections and unmounts the
// tmpfs targets (their content copied out first, so a kept run keeps
// it). It is safe to call on a partly started cluster, and twice.
func (c *Cluster) Close() error {
	for _, p := range c.Procs() {
		p.Kill()
		p.wg.Wait()
	}
	c.connMu.Lock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
	c.connMu.Unlock()
	if c.admin != nil {
		c.admin.Close()
		c.admin = nil
	}
	var errs []error
	for _, dir := range c.mounts {
		if err := unmountKeeping(dir); err != nil {
			errs = append(errs, err)
		}
	}
	c.mounts = nil
	return errors.Join(errs...)
}

// unmountKeeping copies a tmpfs's content aside, unmounts it and copies
// the content back into the now plain directory.
func unmountKeeping(dir string) error {
	keep := dir + ".tmpfs-copy"
	exec.Command("cp", "-a", dir+"/.", keep).Run() // best effort: the copy is for a kept run's reader
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		if out2, err2 := exec.Command("umount", "-l", dir).CombinedOutput(); err2 != nil {
			return fmt.Errorf("unmount %s: %v: %s; lazily: %v: %s", dir, err, out, err2, out2)
		}
	}
	exec.Command("cp", "-a", keep+"/.", dir).Run()
	os.RemoveAll(keep)
	return nil
}

// Start starts the process (again); its output is appended to its log.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("start %s: already running", p.Name)
	}
	log, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	fmt.Fprintf(log, "=== nemesis: start %s at %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, "server", "--role", p.Role, "--config", p.config, "--log-level", p.level)
	cmd.Stdout, cmd.Stderr = &readyWriter{p: p, w: log}, log
	// Never outlive the harness, even one killed before its cleanup (the
	// signal follows the thread that started the child; no goroutine here
	// locks its thread, so Go keeps that thread while the process lives).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.paused, p.expected, p.ready = cmd, exited, false, false, false
	p.wg.Add(1)
	go func() { // owned by p: it ends with the process, and Close waits for it
		defer p.wg.Done()
		err := cmd.Wait()
		log.Close()
		p.mu.Lock()
		expected := p.expected
		if p.cmd == cmd {
			p.cmd, p.ready = nil, false
		}
		p.mu.Unlock()
		close(exited)
		if !expected {
			p.event("exit", "", "%s exited on its own: %v (see %s)", p.Name, err, p.Log)
		}
	}()
	return nil
}

// Running reports whether the process runs (paused counts).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Ready reports whether the process runs and has said it serves (its
// first line: "meta serving on ...", "storage node ... serving ...", once
// registered with mgmtd).
func (p *Proc) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && p.ready
}

// readyWriter is a process's standard output: copied to its log, and
// watched for the line that says it serves.
type readyWriter struct {
	p *Proc
	w io.Writer
}

func (r *readyWriter) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(" serving ")) {
		r.p.mu.Lock()
		r.p.ready = true
		r.p.mu.Unlock()
	}
	return r.w.Write(b)
}

// Paused reports whether the process is stopped with SIGSTOP.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// signal sends sig if the process runs; end marks the exit expected and
// waits for it.
func (p *Proc) signal(sig syscall.Signal, end bool, wait time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return nil
	}
	if end {
		p.expected = true
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	p.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s %v: %w", p.Name, sig, err)
	}
	if !end {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("%s: still running %v after %v", p.Name, sig, wait)
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() error {
	p.signal(syscall.SIGCONT, false, 0)
	return p.signal(syscall.SIGKILL, true, 30*time.Second)
}

// Pause stops the process with SIGSTOP.
func (p *Proc) Pause() error { return p.signal(syscall.SIGSTOP, false, 0) }

// Resume continues a paused process with SIGCONT.
func (p *Proc) Resume() error { return p.signal(syscall.SIGCONT, false, 0) }

// Stop ends the process with SIGTERM, or SIGKILL after wait; an error
// says it needed SIGKILL.
func (p *Proc) Stop(wait time.Duration) error {
	p.signal(syscall.SIGCONT, false, 0)
	if err := p.signal(syscall.SIGTERM, true, wait); err != nil {
		p.Kill()
		return fmt.Errorf("stop %s: %w; killed", p.Name, err)
	}
	return nil
}
