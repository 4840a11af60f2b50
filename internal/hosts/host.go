package hosts

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Host is one emulated host: a network namespace with eth0 at Addr.
type Host struct {
	Name string     // its network namespace
	Addr netip.Addr // eth0's address in 198.18.0.0/24
	net  *Net
	port string // its veth's name on the bridge

	mu      sync.Mutex
	rate    int64
	table   bool         // the nftables table exists
	blocked []netip.Addr // peers dropped, or subnet's address when isolated
}

// AddrPort is the host's address with port, as host:port.
func (h *Host) AddrPort(port uint16) string {
	return netip.AddrPortFrom(h.Addr, port).String()
}

// SetRate caps the host's link at rate bytes per second each way (a tbf
// qdisc on eth0 for what it sends and on the bridge's end for what it
// receives); 0 removes the cap. It may change while traffic flows.
func (h *Host) SetRate(rate int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	ends := [][2]string{{h.Name, "eth0"}, {h.net.bridge, h.port}}
	if rate <= 0 {
		if h.rate > 0 {
			for _, e := range ends {
				if err := run("tc", "-n", e[0], "qdisc", "del", "dev", e[1], "root"); err != nil {
					return err
				}
			}
		}
		h.rate = 0
		return nil
	}
	// The bucket holds 10 ms of the rate, and never less than two
	// 64 KiB GSO packets, which tbf would otherwise cut up or drop; the
	// queue holds 100 ms more before tbf drops.
	burst := max(rate/100, 128<<10)
	for _, e := range ends {
		if err := run("tc", "-n", e[0], "qdisc", "replace", "dev", e[1], "root", "tbf",
			"rate", fmt.Sprint(rate, "bps"), "burst", fmt.Sprint(burst), "latency", "100ms"); err != nil {
			return err
		}
	}
	h.rate = rate
	h.net.log.Info("hosts: rate", "host", h.Name, "bytes_per_second", rate)
	return nil
}

// Rate is the host's cap in bytes per second, 0 for none.
func (h *Host) Rate() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rate
}

// Isolate drops every packet between the host and the rest of the Net,
// silently (peers time out rather than being refused), until Heal.
func (h *Host) Isolate() error {
	return h.setBlocked(func([]netip.Addr) []netip.Addr { return []netip.Addr{subnet.Addr()} })
}

// Block drops packets between the host and peers, on top of what is
// blocked already, until Heal. Blocking the other way too (peer.Block(h))
// is the caller's choice: one side alone already stops TCP.
func (h *Host) Block(peers ...*Host) error {
	return h.setBlocked(func(cur []netip.Addr) []netip.Addr {
		next := slices.Clone(cur)
		for _, p := range peers {
			if !slices.Contains(next, p.Addr) {
				next = append(next, p.Addr)
			}
		}
		return next
	})
}

// Heal lets all of the host's traffic through again.
func (h *Host) Heal() error {
	return h.setBlocked(func([]netip.Addr) []netip.Addr { return nil })
}

// setBlocked replaces the set of dropped peers with what next makes of it,
// in one nftables transaction; subnet's own address stands for the whole
// subnet.
func (h *Host) setBlocked(next func(cur []netip.Addr) []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	addrs := next(h.blocked)
	if slices.Contains(addrs, subnet.Addr()) {
		addrs = []netip.Addr{subnet.Addr()} // elements inside it would overlap it
	}
	var script strings.Builder
	if !h.table {
		if len(addrs) == 0 {
			return nil
		}
		script.WriteString(`table inet slh {
	set peers { type ipv4_addr; flags interval; }
	chain input { type filter hook input priority -10; policy accept; iifname "eth0" ip saddr @peers drop; }
	chain output { type filter hook output priority -10; policy accept; oifname "eth0" ip daddr @peers drop; }
}
`)
	}
	script.WriteString("flush set inet slh peers\n")
	if len(addrs) > 0 {
		elems := make([]string, len(addrs))
		for i, a := range addrs {
			elems[i] = a.String()
			if a == subnet.Addr() {
				elems[i] = subnet.String()
			}
		}
		fmt.Fprintf(&script, "add element inet slh peers { %s }\n", strings.Join(elems, ", "))
	}
	cmd := exec.Command("ip", "netns", "exec", h.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("hosts: nft in %s: %v: %s; script:\n%s", h.Name, err, strings.TrimSpace(string(out)), script.String())
	}
	h.table = true
	h.blocked = addrs
	h.net.log.Info("hosts: blocked", "host", h.Name, "peers", addrs)
	return nil
}

// SetLink takes the host's eth0 down (up false) or brings it back: a
// partition the host's own stack sees (sends fail at once rather than
// vanishing).
func (h *Host) SetLink(up bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	state := "up"
	if !up {
		state = "down"
	}
	if err := run("ip", "-n", h.Name, "link", "set", "eth0", state); err != nil {
		return err
	}
	h.net.log.Info("hosts: link", "host", h.Name, "state", state)
	return nil
}

// Do runs fn on an OS thread inside the host's namespace. Sockets fn
// creates stay in the namespace and may be used from any goroutine
// afterwards; goroutines fn starts do not run in it.
func (h *Host) Do(fn func() error) error {
	res := make(chan error, 1)
	go func() {
		// A thread whose namespace cannot be put back is never unlocked,
		// so the runtime ends it with this goroutine.
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			res <- fmt.Errorf("hosts: %w", err)
			return
		}
		defer back.Close()
		ns, err := os.Open("/run/netns/" + h.Name)
		if err != nil {
			res <- fmt.Errorf("hosts: %w", err)
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			res <- fmt.Errorf("hosts: setns %s: %w", h.Name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(back.Fd()), unix.CLONE_NEWNET); err != nil {
			res <- fmt.Errorf("hosts: setns back from %s: %w", h.Name, err)
			return
		}
		runtime.UnlockOSThread()
		res <- ferr
	}()
	return <-res
}

// Dial connects from the host, as net.Dialer.DialContext does.
func (h *Host) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens in the host, as net.ListenConfig.Listen does.
func (h *Host) Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := h.Do(func() error {
		var err error
		l, err = (&net.ListenConfig{}).Listen(ctx, network, addr)
		return err
	})
	return l, err
}
