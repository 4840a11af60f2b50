package raftstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func openT(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLogStore(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	if f, _ := s.FirstIndex(); f != 0 {
		t.Fatalf("first index of an empty log: %d", f)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: i / 3, Type: raft.LogCommand, Data: []byte(fmt.Sprint("cmd", i)),
			Extensions: []byte{byte(i)}, AppendedAt: time.Unix(1700000000, int64(i))})
	}
	if err := s.StoreLogs(logs[:9]); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(logs[9]); err != nil {
		t.Fatal(err)
	}
	check := func(first, last uint64) {
		t.Helper()
		f, _ := s.FirstIndex()
		l, _ := s.LastIndex()
		if f != first || l != last {
			t.Fatalf("log spans %d..%d, want %d..%d", f, l, first, last)
		}
		for i := first; i <= last; i++ {
			var got raft.Log
			if err := s.GetLog(i, &got); err != nil {
				t.Fatal(err)
			}
			w := logs[i-1]
			if got.Index != w.Index || got.Term != w.Term || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) ||
				!bytes.Equal(got.Extensions, w.Extensions) || !got.AppendedAt.Equal(w.AppendedAt) {
				t.Fatalf("entry %d: got %+v, want %+v", i, got, *w)
			}
		}
	}
	check(1, 10)
	var missing raft.Log
	if err := s.GetLog(11, &missing); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("missing entry: %v", err)
	}
	if err := s.DeleteRange(1, 4); err != nil { // compaction after a snapshot
		t.Fatal(err)
	}
	check(5, 10)
	if err := s.DeleteRange(9, 10); err != nil { // a conflicting suffix
		t.Fatal(err)
	}
	check(5, 8)
	s.Close()
	s = openT(t, dir)
	defer s.Close()
	check(5, 8)
}

func TestStableStore(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	if _, err := s.Get([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v, want the exact text raft looks for", err)
	}
	if _, err := s.GetUint64([]byte("LastVoteTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing integer: %v", err)
	}
	s.Set([]byte("LastVoteCand"), []byte("node-2"))
	s.SetUint64([]byte("CurrentTerm"), 42)
	s.Close()
	s = openT(t, dir)
	defer s.Close()
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "node-2" {
		t.Fatalf("after restart: %q %v", v, err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 42 {
		t.Fatalf("after restart: %d %v", v, err)
	}
}

func TestDecodeRefusesCorruption(t *testing.T) {
	b := encodeLog(&raft.Log{Index: 1, Term: 1, Data: []byte("hello"), Extensions: []byte("x")})
	var l raft.Log
	if err := decodeLog(b, &l); err != nil || string(l.Data) != "hello" {
		t.Fatalf("round trip: %v", err)
	}
	for _, n := range []int{0, 10, 32, len(b) - 1} {
		if err := decodeLog(b[:n], &l); err == nil {
			t.Fatalf("truncated to %d bytes: decoded", n)
		}
	}
	if err := decodeLog(append(b, 0), &l); err == nil {
		t.Fatal("trailing garbage decoded")
	}
}

// kv is a tiny replicated map for the cluster test.
type kv struct {
	mu sync.Mutex
	m  map[string]string
}

func (f *kv) Apply(l *raft.Log) interface{} {
	k, v, _ := bytes.Cut(l.Data, []byte("="))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[string(k)] = string(v)
	return nil
}

func (f *kv) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.Marshal(f.m)
	return snap(b), err
}

func (f *kv) Restore(r io.ReadCloser) error {
	defer r.Close()
	m := map[string]string{}
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		return err
	}
	f.mu.Lock()
	f.m = m
	f.mu.Unlock()
	return nil
}

func (f *kv) snapshot() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.m))
	for k, v := range f.m {
		out[k] = v
	}
	return out
}

type snap []byte

func (s snap) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}
func (snap) Release() {}

type member struct {
	id    raft.ServerID
	dir   string
	store *Store
	fsm   *kv
	r     *raft.Raft
	trans *raft.InmemTransport
}

func (m *member) start(t *testing.T, peers []*member) {
	t.Helper()
	m.store = openT(t, m.dir+"/raft")
	snaps, err := raft.NewFileSnapshotStore(m.dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, m.trans = raft.NewInmemTransport(raft.ServerAddress(m.id))
	for _, p := range peers {
		if p != m && p.trans != nil {
			m.trans.Connect(p.trans.LocalAddr(), p.trans)
			p.trans.Connect(m.trans.LocalAddr(), m.trans)
		}
	}
	cfg := raft.DefaultConfig()
	cfg.LocalID = m.id
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = 100*time.Millisecond, 100*time.Millisecond
	cfg.LeaderLeaseTimeout, cfg.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
	cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = 20, 10, 50*time.Millisecond
	cfg.Logger = hclog.NewNullLogger()
	m.fsm = &kv{m: map[string]string{}}
	if m.r, err = raft.NewRaft(cfg, m.fsm, m.store, m.store, snaps, m.trans); err != nil {
		t.Fatal(err)
	}
}

func (m *member) stop() {
	m.r.Shutdown().Error()
	m.store.Close()
	m.trans.Close()
	m.trans = nil
}

func leader(t *testing.T, ms []*member) *member {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range ms {
			if m.r != nil && m.trans != nil && m.r.State() == raft.Leader {
				return m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader")
	return nil
}

// TestRaftOnPebble: three hashicorp/raft replicas on these stores; the
// leader stops mid-stream, the others go on, it restarts from its Pebble
// store and snapshots and catches up; every replica's state ends equal,
// with nothing acknowledged lost.
func TestRaftOnPebble(t *testing.T) {
	var ms []*member
	for i := 1; i <= 3; i++ {
		ms = append(ms, &member{id: raft.ServerID(fmt.Sprint("n", i)), dir: t.TempDir()})
	}
	for _, m := range ms {
		m.start(t, ms)
	}
	var servers []raft.Server
	for _, m := range ms {
		servers = append(servers, raft.Server{ID: m.id, Address: m.trans.LocalAddr()})
	}
	if err := ms[0].r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	apply := func(from, to int) {
		for i := from; i < to; i++ {
			l := leader(t, ms)
			if err := l.r.Apply([]byte(fmt.Sprintf("k%d=v%d", i%37, i)), 5*time.Second).Error(); err != nil {
				i-- // leadership moved; the acknowledged ones are what count
				continue
			}
		}
	}
	apply(0, 100)
	old := leader(t, ms)
	old.stop()
	apply(100, 200)
	old.start(t, ms)
	apply(200, 230)
	want := map[string]string{}
	for i := 0; i < 230; i++ {
		want[fmt.Sprintf("k%d", i%37)] = fmt.Sprintf("v%d", i)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, m := range ms {
		for {
			got := m.fsm.snapshot()
			if fmt.Sprint(got) == fmt.Sprint(want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: state %v, want %v", m.id, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Snapshots every 20 entries must have compacted the logs (DeleteRange).
	compacted := false
	for _, m := range ms {
		if f, _ := m.store.FirstIndex(); f > 1 {
			compacted = true
		}
	}
	if !compacted {
		t.Fatal("no replica compacted its log after snapshots")
	}
	for _, m := range ms {
		m.stop()
	}
}
