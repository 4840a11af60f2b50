package hosts

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Prefix starts the name of every namespace this package makes.
const Prefix = "slh-"

// ErrUnsupported is wrapped by Open's error when this machine cannot run
// a Net: not root, no `ip`, or namespaces cannot be created.
var ErrUnsupported = errors.New("hosts: network namespaces unavailable")

// The hosts' network (RFC 2544's benchmarking range, routed nowhere), the
// bridge's address in it, and host 0's; host i has firstHost+i. Read only.
var (
	subnet     = netip.MustParsePrefix("198.18.0.0/24")
	bridgeAddr = netip.MustParseAddr("198.18.0.1")
	firstHost  = netip.MustParseAddr("198.18.0.10")
)

// MaxHosts is how many hosts one Net can have (.10 to .254).
const MaxHosts = 245

// Config describes a Net. Zero fields take the defaults in brackets.
type Config struct {
	Hosts int // emulated hosts [1]
	// Rate caps every host's link at this many bytes per second each
	// way from the start [0: no cap]; Host.SetRate changes it later.
	Rate   int64
	Logger *slog.Logger // [discard]
}

// Net is a set of emulated hosts joined by one bridge.
type Net struct {
	Hosts  []*Host
	bridge string // the bridge's namespace
	log    *slog.Logger

	mu     sync.Mutex
	nss    []string // namespaces made, in order
	procs  []*Proc
	closed bool
}

// nets numbers the Nets of this process, to keep their names apart.
var nets atomic.Uint64

// New is Open for a test: it skips tb when the machine cannot run a Net,
// fails it on any other error, and closes the Net when tb ends.
func New(tb testing.TB, cfg Config) *Net {
	tb.Helper()
	n, err := Open(cfg)
	if errors.Is(err, ErrUnsupported) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := n.Close(); err != nil {
			tb.Error(err)
		}
	})
	return n
}

// Open removes the namespaces of earlier runs that are gone and makes the
// bridge and cfg.Hosts hosts. Its error wraps ErrUnsupported when the
// machine cannot run a Net.
func Open(cfg Config) (*Net, error) {
	if cfg.Hosts <= 0 {
		cfg.Hosts = 1
	}
	if cfg.Hosts > MaxHosts {
		return nil, fmt.Errorf("hosts: %d hosts, at most %d", cfg.Hosts, MaxHosts)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: not root (uid %d)", ErrUnsupported, os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if err := RemoveStale(cfg.Logger); err != nil {
		return nil, err
	}
	base := fmt.Sprintf("%s%d-%d-", Prefix, os.Getpid(), nets.Add(1))
	n := &Net{bridge: base + "br", log: cfg.Logger}
	fail := func(err error) (*Net, error) {
		if cerr := n.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	if err := n.addNS(n.bridge); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrUnsupported, err))
	}
	if err := run("ip", "-n", n.bridge, "link", "add", "br0", "type", "bridge"); err != nil {
		return fail(err)
	}
	if err := run("ip", "-n", n.bridge, "addr", "add", netip.PrefixFrom(bridgeAddr, subnet.Bits()).String(), "dev", "br0"); err != nil {
		return fail(err)
	}
	for _, link := range []string{"lo", "br0"} {
		if err := run("ip", "-n", n.bridge, "link", "set", link, "up"); err != nil {
			return fail(err)
		}
	}
	addr := firstHost
	for i := range cfg.Hosts {
		h, err := n.addHost(base, i, addr)
		if err != nil {
			return fail(err)
		}
		if cfg.Rate > 0 {
			if err := h.SetRate(cfg.Rate); err != nil {
				return fail(err)
			}
		}
		n.Hosts = append(n.Hosts, h)
		addr = addr.Next()
	}
	n.log.Info("hosts: net up", "bridge", n.bridge, "hosts", cfg.Hosts, "rate", cfg.Rate)
	return n, nil
}

// addNS creates a namespace and records it for Close.
func (n *Net) addNS(name string) error {
	if err := run("ip", "netns", "add", name); err != nil {
		return err
	}
	n.mu.Lock()
	n.nss = append(n.nss, name)
	n.mu.Unlock()
	// IPv4 only: IPv6 link-local addresses would give hosts a way around
	// the partitions, which drop IPv4 peers.
	if _, err := os.Stat("/proc/sys/net/ipv6"); err == nil {
		if err := run("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
			return err
		}
	}
	return run("ip", "-n", name, "link", "set", "lo", "up")
}

// addHost makes host i's namespace and its veth pair: eth0 in the host,
// vh<i> on the bridge.
func (n *Net) addHost(base string, i int, addr netip.Addr) (*Host, error) {
	h := &Host{net: n, Name: fmt.Sprintf("%sh%d", base, i), Addr: addr, port: fmt.Sprint("vh", i)}
	if err := n.addNS(h.Name); err != nil {
		return nil, err
	}
	// Made in the bridge's namespace with its peer put straight into the
	// host's: neither end ever exists in the machine's namespace.
	if err := run("ip", "-n", n.bridge, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.Name); err != nil {
		return nil, err
	}
	steps := [][]string{
		{"ip", "-n", n.bridge, "link", "set", h.port, "master", "br0"},
		{"ip", "-n", n.bridge, "link", "set", h.port, "up"},
		{"ip", "-n", h.Name, "addr", "add", netip.PrefixFrom(addr, subnet.Bits()).String(), "dev", "eth0"},
		{"ip", "-n", h.Name, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Host is host i, or nil.
func (n *Net) Host(i int) *Host {
	if i < 0 || i >= len(n.Hosts) {
		return nil
	}
	return n.Hosts[i]
}

// Close kills every process started in a host, then removes every
// namespace the Net made, and with them their links and qdiscs. It may be
// called more than once.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	procs, nss := n.procs, n.nss
	n.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	for _, p := range procs {
		<-p.Done()
	}
	var errs []error
	// Hosts first, the bridge last (it was made first).
	for i := len(nss) - 1; i >= 0; i-- {
		if err := run("ip", "netns", "delete", nss[i]); err != nil {
			errs = append(errs, err)
		}
	}
	n.log.Info("hosts: net down", "bridge", n.bridge)
	return errors.Join(errs...)
}

// Namespaces lists the namespaces of this package now on the machine.
func Namespaces() ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("hosts: ip netns list: %v: %s", err, bytes.TrimSpace(out))
	}
	var names []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line) // NAME [(id: N)]
		if len(f) > 0 && strings.HasPrefix(f[0], Prefix) {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// RemoveStale deletes the namespaces of this package whose process is
// gone, and those whose name does not say whose they are.
func RemoveStale(log *slog.Logger) error {
	names, err := Namespaces()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	var errs []error
	for _, name := range names {
		if owner, ok := ownerOf(name); ok && (owner == os.Getpid() || alive(owner)) {
			continue
		}
		log.Info("hosts: removing a stale namespace", "netns", name)
		// Another process's Open may have removed it first.
		if err := run("ip", "netns", "delete", name); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ownerOf is the pid in a name slh-<pid>-<n>-….
func ownerOf(name string) (int, bool) {
	pid, _, ok := strings.Cut(strings.TrimPrefix(name, Prefix), "-")
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(pid)
	return p, err == nil && p > 0
}

func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprint("/proc/", pid))
	return err == nil
}

// run runs a command, its error carrying the command and its output.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("hosts: %s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
